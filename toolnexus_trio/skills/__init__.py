"""The skill source (SPEC §3): ``SKILL.md`` folders, skills as data, and the ``skill`` tool.

Give :class:`~toolnexus_trio.ToolkitOptions` a ``skills_dir`` (and/or ``skills``, a
``skill_provider``) and the toolkit gets one ``skill`` tool that loads a skill's
instructions on demand, plus :meth:`~toolnexus_trio.Toolkit.skills_prompt`, the catalog
for the system prompt. :func:`list_skills` is the inventory without a toolkit.
"""

from ._source import NO_SKILLS_PROMPT as NO_SKILLS_PROMPT
from ._source import SKILL_TOOL_DESCRIPTION as SKILL_TOOL_DESCRIPTION
from ._source import SKILLS_PROMPT_PREAMBLE as SKILLS_PROMPT_PREAMBLE
from ._source import list_skills as list_skills
from ._types import SkillDef as SkillDef
from ._types import SkillInfo as SkillInfo
from ._types import SkillInventory as SkillInventory
from ._types import SkillProvider as SkillProvider
from ._types import SkillSkip as SkillSkip
from ._types import SkipReason as SkipReason

__all__ = [
    "NO_SKILLS_PROMPT",
    "SKILLS_PROMPT_PREAMBLE",
    "SKILL_TOOL_DESCRIPTION",
    "SkillDef",
    "SkillInfo",
    "SkillInventory",
    "SkillProvider",
    "SkillSkip",
    "SkipReason",
    "list_skills",
]
