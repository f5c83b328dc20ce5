"""Memory per rank, compute and communication time, iteration time, and cost of a plan.

Pure Python with numpy; never imports torch. Arrives with the cost-model issue (#3).
"""
