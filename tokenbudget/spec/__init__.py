"""What must hold: observations, the named invariants and the trace format."""
from .invariants import INVARIANTS, ConfigProbe, Invariant, Violation, check_run, check_step, work_gap
from .records import EncoderInput, LedgerEntry, RequestState, RunRecord, StepLimits, StepOutcome, StepRecord
from .trace import Trace, TraceError, dump_trace, load_trace, parse_trace, write_trace

__all__ = [
    "INVARIANTS", "ConfigProbe", "Invariant", "Violation", "check_run", "check_step", "work_gap",
    "EncoderInput", "LedgerEntry", "RequestState", "RunRecord", "StepLimits", "StepOutcome", "StepRecord",
    "Trace", "TraceError", "dump_trace", "load_trace", "parse_trace", "write_trace",
]
