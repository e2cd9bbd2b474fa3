"""The catalog: what an analyst writes (schemas, prompt templates, settings), loaded and checked.

- :mod:`extractor.catalog.tasks`: Task and Catalog, every load check;
- :mod:`extractor.catalog.templating`, :mod:`extractor.catalog.prompting`: templates, the chat they render;
- :mod:`extractor.catalog.limits`, :mod:`extractor.catalog.budget`: what a schema may ask (its
  patterns: :mod:`extractor.constraints.patterns`);
- :mod:`extractor.catalog.reload`: hot reload; :mod:`extractor.catalog.codegen`: pydantic modules of tasks.
"""
