from bench.agentic.cli import app

app()
