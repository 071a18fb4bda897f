"""`nmt preprocess`: a parallel corpus into a DATA_DIR (nmt.data.preprocess)."""

from __future__ import annotations

import typer

from nmt.cli.errors import user_errors
from nmt.cli.flags import QuietOpt
from nmt.cli.progress import step_progress

commands = typer.Typer()


@commands.command("preprocess")
@user_errors
def preprocess_cmd(
    src_lang: str = typer.Option(..., "--src-lang", help="Source language suffix, e.g. en."),
    tgt_lang: str = typer.Option(..., "--tgt-lang", help="Target language suffix, e.g. de."),
    train: str = typer.Option(
        ...,
        "--train",
        help="Train prefix: PREFIX.<lang> (plain or .gz), or a .tsv / .tsv.gz file of "
        "tab-separated pairs.",
    ),
    valid: str = typer.Option(None, "--valid", help="Validation prefix (never cleaned)."),
    test: list[str] = typer.Option(None, "--test", help="Test prefix; repeat for more."),
    out_dir: str = typer.Option(..., "--out", "-o", help="DATA_DIR to create."),
    vocab_size: int = typer.Option(8000, "--vocab-size", help="SentencePiece vocabulary size."),
    spm_type: str = typer.Option("unigram", "--spm-type", help="unigram or bpe."),
    joint: bool = typer.Option(
        True, "--joint/--separate", help="One shared vocabulary, or one per language."
    ),
    max_len: int = typer.Option(
        250, "--max-len", help="Drop train pairs with a side longer than this (subwords)."
    ),
    max_ratio: float = typer.Option(
        3.0, "--max-ratio", help="Drop train pairs whose longer/shorter side ratio is higher."
    ),
    dedupe: bool = typer.Option(False, "--dedupe", help="Drop duplicate train pairs."),
    threads: int = typer.Option(
        None,
        "--threads",
        help="Worker processes (default: OMP_NUM_THREADS, else every CPU this process may use).",
    ),
    force: bool = typer.Option(False, "--force", help="Replace an existing non-empty DATA_DIR."),
    skip_invalid: bool = typer.Option(
        False,
        "--skip-invalid",
        help="Drop train pairs with invalid UTF-8 (and TSV lines that are not two columns) "
        "instead of failing.",
    ),
    columns: str = typer.Option(
        None,
        "--columns",
        help="A TSV --train's column languages in order, e.g. en,de (default: source, target).",
    ),
    split_valid: int = typer.Option(
        0, "--split-valid", help="Hold N train pairs out as the validation split (no --valid)."
    ),
    split_test: int = typer.Option(
        0,
        "--split-test",
        help="Hold N train pairs out as the test split (no --test); train pairs whose source is "
        "a test source are dropped.",
    ),
    valid_sample: int = typer.Option(
        0,
        "--valid-sample",
        help="Validate on a seeded sample of N --valid lines, kept in file order (a large dev "
        "set, or one ordered by document); 0: every line.",
    ),
    seed: int = typer.Option(
        1, "--seed", help="Seed that draws --split-valid/--split-test pairs and --valid-sample."
    ),
    character_coverage: float = typer.Option(
        1.0, "--character-coverage", help="SentencePiece character coverage (0.9995 for CJK)."
    ),
    spm_sample: int = typer.Option(
        500_000, "--spm-sample", help="Sentences sampled to learn SentencePiece (bounds memory)."
    ),
    spm_from: str = typer.Option(
        None,
        "--spm-from",
        help="Reuse the SentencePiece models of this MODEL_DIR or DATA_DIR instead of learning "
        "new ones (for nmt train --init-from); --vocab-size, --spm-type and --joint are theirs.",
    ),
    tokenizer_from: str = typer.Option(
        None,
        "--tokenizer-from",
        help="Encode with this MODEL_DIR's own tokenizer (an imported model's vocabulary and "
        "special ids, or an nmt model's SentencePiece) for nmt train --init-from it; no "
        "SentencePiece is learnt.",
    ),
    extend_vocab: int = typer.Option(
        0,
        "--extend-vocab",
        help="With --spm-from: append up to N pieces for the characters its models cannot "
        "encode (a new language's letters), learnt from this corpus; existing ids keep "
        "their pieces and text without new characters encodes as before.",
    ),
    extend_all: bool = typer.Option(
        False,
        "--extend-all",
        help="With --extend-vocab: offer every piece this corpus wants (the new language's "
        "words in old letters too), less those that would change how its text in the reused "
        "models' own languages encodes.",
    ),
    lowercase: bool = typer.Option(
        False,
        "--lowercase",
        help="Lowercase every split (most Multi30k papers' setting): the model then sees and "
        "writes lowercased text, translate lowercases its input, and BLEU is case-insensitive.",
    ),
    quiet: QuietOpt = False,
) -> None:
    """Clean a parallel corpus, learn SentencePiece, and encode every split into DATA_DIR."""
    # First, while the options are the only names bound: all but three are PreprocessConfig's
    # fields, by the same names.
    options = dict(locals())
    import contextlib

    from nmt.data.preprocess import PreprocessConfig, preprocess
    from nmt.data.tsv import parse_columns
    from nmt.dirs.opening import open_tokenizer_model, open_vocabulary

    for name in ("out_dir", "force", "quiet"):  # preprocess()'s own arguments
        del options[name]
    options["tests"] = options.pop("test") or ()
    options["columns"] = None if columns is None else parse_columns(columns)
    if spm_from is not None:
        options["spm_from"] = open_vocabulary(spm_from)
    if tokenizer_from is not None:
        options["tokenizer_from"] = open_tokenizer_model(tokenizer_from)
    cfg = PreprocessConfig(**options)
    with contextlib.ExitStack() as stack:
        progress = None if quiet else step_progress(stack)
        manifest = preprocess(cfg, out_dir, force=force, quiet=quiet, progress=progress)
    if not quiet:
        from nmt.data.summary import print_summary

        print_summary(manifest)
