"""Every command has -h and help text."""
import click
from click.testing import CliRunner

from slurm_plugin.cli import main


def walk(command, path=()):
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            yield from walk(command.get_command(ctx, name), path + (name,))


def test_every_command_has_help_and_dash_h():
    runner = CliRunner()
    seen = 0
    for path, command in walk(main):
        assert (command.help or "").strip(), f"gpupack {' '.join(path)} has no help text"
        result = runner.invoke(main, [*path, "-h"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage:" in result.output
        seen += 1
    assert seen > 15
