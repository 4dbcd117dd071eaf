"""The referee's names in their former home: the candidate session, its records and rules now
live in modules of their own (session.py, records.py, rules.py, conversation.py,
correctness.py, timing/, build_serving.py). This module re-exports them for code that imports
them from here."""

from kernelopt.sandbox.build_serving import build_service
from kernelopt.sandbox.records import CallRecord, CallReply, InputSet, ReferenceTrials, SideRound, input_sets
from kernelopt.sandbox.rules import ProblemCodeFailed, VerdictReached, known_flag
from kernelopt.sandbox.session import INIT_SEED, CandidateSession, load_message
from kernelopt.sandbox.worker.commands import call as _call


def call_message(input_set: InputSet) -> dict:
    """The `call` command for one input set (its bytes travel in the slot or the frame)."""
    return _call(input_set.seed, input_set.spec)


__all__ = [
    "INIT_SEED", "CallRecord", "CallReply", "CandidateSession", "InputSet", "ProblemCodeFailed", "ReferenceTrials",
    "SideRound", "VerdictReached", "build_service", "call_message", "input_sets", "known_flag", "load_message",
]
