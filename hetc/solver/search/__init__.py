"""The planner's search (see `driver` for the overview and the proof that it is exact)."""

from hetc.solver.search.driver import APPROXIMATIONS, search
from hetc.solver.search.incumbent import Candidate, Progress, SearchOptions, SearchResult

__all__ = [
    "APPROXIMATIONS",
    "Candidate",
    "Progress",
    "SearchOptions",
    "SearchResult",
    "search",
]
