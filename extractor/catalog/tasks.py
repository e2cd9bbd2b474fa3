"""Tasks and the catalog, by the names the rest of the project imports them under.

The concerns live apart: :mod:`extractor.catalog.task` (the Task and its fields),
:mod:`extractor.catalog.settings` (the ``x-extractor`` block), :mod:`extractor.catalog.checks`
(a schema's load checks), :mod:`extractor.catalog.loading` (the catalog: discovery, loading, and
the adapter and calibration attached to each task), :mod:`extractor.catalog.calibration` (the map
the catalog reads).
"""

from extractor.catalog.calibration import calibration_path
from extractor.catalog.loading import PROMPT_SUFFIXES, TASK_NAME, Catalog, load_task, task_from_schema
from extractor.catalog.settings import SETTINGS_KEY, ChunkSettings, ReviewSettings, TaskSettings
from extractor.catalog.task import FieldInfo, Task, describe_fields, type_label

__all__ = [
    "PROMPT_SUFFIXES",
    "SETTINGS_KEY",
    "TASK_NAME",
    "Catalog",
    "ChunkSettings",
    "FieldInfo",
    "ReviewSettings",
    "Task",
    "TaskSettings",
    "calibration_path",
    "describe_fields",
    "load_task",
    "task_from_schema",
    "type_label",
]
