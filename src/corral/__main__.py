from corral.cli import run

run()
