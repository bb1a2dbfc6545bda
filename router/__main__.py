from router.tools.cli import app

app()
