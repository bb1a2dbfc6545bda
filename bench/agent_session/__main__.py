from bench.agent_session.run import app

app()
