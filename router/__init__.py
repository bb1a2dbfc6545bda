"""agent-router: a routing proxy for tool-using agents."""
