"""`python -m nmt` (and `torchrun -m nmt train ...`) run the CLI."""

from nmt.cli import app

if __name__ == "__main__":
    app()
