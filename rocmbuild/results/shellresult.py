"""What the verbs about the command line itself return (``completion``)."""

from __future__ import annotations

from dataclasses import dataclass

from rocmbuild.results.base import Record, VerbResult


@dataclass(frozen=True)
class CompletionResult(Record, VerbResult):
    shell: str  # "bash", "zsh" or "fish"
    script: str  # the completion script, exactly what text mode prints
