"""Independent test oracles: small random specs and an exhaustive enumerator that the planner's
search is checked against."""
