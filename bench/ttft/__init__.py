"""Time to first token per agent turn over a WAN: new HTTPS connection vs keep-alive vs WebSocket mode.

    python -m bench.ttft [--quick]      → bench/results/ttft.md, bench/results/ttft.png

wan.py     the latency-adding TCP relay (RTT/2 each way, one more RTT before the first client bytes)
agent.py   the 20-turn tool loop, three ways, through the official openai SDK
run.py     starts the fake upstream, the proxy (TLS) and the relay; measures; writes the report
"""
