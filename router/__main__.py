from router.cli import app

app()
