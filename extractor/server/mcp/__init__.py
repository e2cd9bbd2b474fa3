"""Tasks as tools for agents: an MCP server where each task is a tool whose output schema is the task's schema.

``tools`` (pure: tool definitions, arguments, results and errors), ``server`` (the SDK's server over a
:class:`~extractor.server.service.Service`, told of reloads), ``http`` (mounted at ``/mcp`` in
``extractor serve``), ``stdio`` (``extractor mcp``). An interface, like ``server/`` and the CLI: nothing
below imports it.
"""
