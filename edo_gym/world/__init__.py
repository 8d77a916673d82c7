"""The synthetic world: entities, facts, documents and task families."""

from edo_gym.world.generator import RELATIONS, Document, World
from edo_gym.world.tasks import Subtask, Task, TaskPool

__all__ = ["RELATIONS", "Document", "Subtask", "Task", "TaskPool", "World"]
