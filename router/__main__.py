from router.commands.cli import app

app()
