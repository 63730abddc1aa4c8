import argparse

import pytest

from perfpredict.cli import adapt, train


@pytest.mark.parametrize("command", [train, adapt])
def test_train_and_adapt_take_the_same_learning_args(command):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    command.register(sub)
    name = command.__name__.rpartition(".")[2]
    required = ["--device", "x"] + (["--data", "rows"] if name == "adapt" else [])
    args = parser.parse_args([name, *required, "--seed", "3", "--latency-stat", "min", "--include-busy-host"])
    assert (args.seed, args.latency_stat, args.include_busy_host) == (3, "min", True)
    defaults = parser.parse_args([name, *required])
    assert (defaults.seed, defaults.latency_stat, defaults.include_busy_host) == (0, "median", False)
    with pytest.raises(SystemExit):
        parser.parse_args([name, *required, "--latency-stat", "mean"])


def test_the_args_become_the_learning_keywords():
    from perfpredict.cli.learning_args import learning_kwargs

    parser = argparse.ArgumentParser()
    train.register(parser.add_subparsers())
    args = parser.parse_args(["train", "--device", "x", "--seed", "5", "--include-busy-host"])
    assert learning_kwargs(args) == {
        "out_root": None,
        "seed": 5,
        "latency_stat": "median",
        "include_busy_host": True,
        "progress": True,
    }
