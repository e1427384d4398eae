"""Typed judgments (SPEC §8B): a :class:`Classifier` answers typed questions about a
state with calibrated probabilities, never free text, and the simple layer over it
(:func:`ask`, :func:`gate`, the question builders, :class:`Bands`, :class:`Rule`,
:class:`Policy`, :class:`Tape`) and the batteries (a tool guard, tool, skill and
tool-result relevance, a completion check, agent and model routers, a content guard).

Its own subpackage, loaded only when imported (``import toolnexus_trio`` does not):
its :func:`ask` is not the package's ``ask``. The HTTP side is the models' client.
"""

from ._batteries import CompleteVerdict as CompleteVerdict
from ._batteries import FilterVerdict as FilterVerdict
from ._batteries import IsCompleteClassifier as IsCompleteClassifier
from ._batteries import RelevanceVerdict as RelevanceVerdict
from ._batteries import SkillRelevanceClassifier as SkillRelevanceClassifier
from ._batteries import ToolGuardClassifier as ToolGuardClassifier
from ._batteries import ToolGuardVerdict as ToolGuardVerdict
from ._batteries import ToolRelevanceClassifier as ToolRelevanceClassifier
from ._batteries import ToolResultFilterClassifier as ToolResultFilterClassifier
from ._batteries import latest_user_text as latest_user_text
from ._classifier import Classifier as Classifier
from ._classifier import RecordedDecision as RecordedDecision
from ._classifier import create_classifier as create_classifier
from ._decision import NEAR_UNIFORM_TOLERANCE as NEAR_UNIFORM_TOLERANCE
from ._decision import ChoiceAnswer as ChoiceAnswer
from ._decision import ClassifierUsage as ClassifierUsage
from ._decision import Decision as Decision
from ._decision import NoulAnswer as NoulAnswer
from ._decision import ScoreAnswer as ScoreAnswer
from ._decision import near_uniform as near_uniform
from ._questions import MAX_CHOICE_OPTIONS as MAX_CHOICE_OPTIONS
from ._questions import MAX_SCORE_LEVELS as MAX_SCORE_LEVELS
from ._questions import MIN_SCORE_LEVELS as MIN_SCORE_LEVELS
from ._questions import ChoiceQuestion as ChoiceQuestion
from ._questions import ClassifierError as ClassifierError
from ._questions import NoulCriteria as NoulCriteria
from ._questions import NoulQuestion as NoulQuestion
from ._questions import Question as Question
from ._questions import ScoreQuestion as ScoreQuestion
from ._questions import canonical_request as canonical_request
from ._questions import choice_over as choice_over
from ._questions import question_from_wire as question_from_wire
from ._routing import AgentRouterClassifier as AgentRouterClassifier
from ._routing import AgentVerdict as AgentVerdict
from ._routing import ContentGuardBlocked as ContentGuardBlocked
from ._routing import ContentGuardClassifier as ContentGuardClassifier
from ._routing import ContentVerdict as ContentVerdict
from ._routing import ModelRouterClassifier as ModelRouterClassifier
from ._routing import ModelVerdict as ModelVerdict
from ._simple import AnswerView as AnswerView
from ._simple import Bands as Bands
from ._simple import GateResult as GateResult
from ._simple import NamedQuestion as NamedQuestion
from ._simple import Policy as Policy
from ._simple import Rule as Rule
from ._simple import Tape as Tape
from ._simple import ask as ask
from ._simple import choice as choice
from ._simple import context as context
from ._simple import gate as gate
from ._simple import noul as noul
from ._simple import questions as questions
from ._simple import questions_wire as questions_wire
from ._simple import score as score
from ._simple import state as state
from ._simple import static_classifier as static_classifier

__all__ = [
    "MAX_CHOICE_OPTIONS",
    "MAX_SCORE_LEVELS",
    "MIN_SCORE_LEVELS",
    "NEAR_UNIFORM_TOLERANCE",
    "AgentRouterClassifier",
    "AgentVerdict",
    "AnswerView",
    "Bands",
    "ChoiceAnswer",
    "ChoiceQuestion",
    "Classifier",
    "ClassifierError",
    "ClassifierUsage",
    "CompleteVerdict",
    "ContentGuardBlocked",
    "ContentGuardClassifier",
    "ContentVerdict",
    "Decision",
    "FilterVerdict",
    "GateResult",
    "IsCompleteClassifier",
    "ModelRouterClassifier",
    "ModelVerdict",
    "NamedQuestion",
    "NoulAnswer",
    "NoulCriteria",
    "NoulQuestion",
    "Policy",
    "Question",
    "RecordedDecision",
    "RelevanceVerdict",
    "Rule",
    "ScoreAnswer",
    "ScoreQuestion",
    "SkillRelevanceClassifier",
    "Tape",
    "ToolGuardClassifier",
    "ToolGuardVerdict",
    "ToolRelevanceClassifier",
    "ToolResultFilterClassifier",
    "ask",
    "canonical_request",
    "choice",
    "choice_over",
    "context",
    "create_classifier",
    "gate",
    "latest_user_text",
    "near_uniform",
    "noul",
    "question_from_wire",
    "questions",
    "questions_wire",
    "score",
    "state",
    "static_classifier",
]
