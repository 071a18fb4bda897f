"""`python -m nmt` (and `torchrun -m nmt train ...`) run the CLI."""

from nmt.cli.app import run

if __name__ == "__main__":
    run()
