"""The task: small-number addition with a verifiable reward, like nanochat's `tasks/gsm8k.py`.

A prompt is "ab+cd=" with both operands zero-padded to `n_digits`, so every prompt has the same
length (no padding in a batched prefill). The correct completion is the sum without padding
followed by the end character ".", e.g. "12+07=" -> "19.". Completions are sampled until "." or
`max_new_tokens`, so response lengths vary and an untrained policy produces a long tail.
"""

from dataclasses import dataclass

import numpy as np

CHARS = "0123456789+=."  # one token per character; "." ends a completion
EOS = "."


@dataclass(frozen=True)
class Addition:
    n_digits: int = 2
    """digits per operand; prompts are 2*n_digits + 2 tokens"""
    partial_credit: float = 0.5
    """reward share for digits right by position when the answer is not exact (0 = exact only)"""

    @property
    def vocab_size(self) -> int:
        return len(CHARS)

    @property
    def eos_id(self) -> int:
        return CHARS.index(EOS)

    @property
    def prompt_tokens(self) -> int:
        return 2 * self.n_digits + 2

    @property
    def max_answer_tokens(self) -> int:
        """Tokens of the longest correct completion, the end character included."""
        return self.n_digits + 2

    def encode(self, text: str) -> list[int]:
        return [CHARS.index(c) for c in text]

    def decode(self, ids) -> str:
        return "".join(CHARS[int(i)] for i in ids)

    def sample_prompts(self, n: int, rng: np.random.Generator) -> list[str]:
        """n prompts with operands drawn uniformly from [0, 10**n_digits)."""
        operands = rng.integers(0, 10**self.n_digits, size=(n, 2))
        return [f"{a:0{self.n_digits}d}+{b:0{self.n_digits}d}=" for a, b in operands]

    def answer(self, prompt: str) -> str:
        a, b = prompt.rstrip("=").split("+")
        return f"{int(a) + int(b)}{EOS}"

    def reward(self, prompt: str, completion: str) -> float:
        """1.0 for the exact answer (end character included), else partial credit.

        Partial credit is `partial_credit` times the share of the answer's characters that the
        completion has right at the same position, scaled down when the completion is longer than
        the answer: it rewards getting the leading digits and the length right, which gives GRPO
        a gradient before any completion is exact.
        """
        target = self.answer(prompt)
        if completion == target:
            return 1.0
        hits = sum(c == t for c, t in zip(completion, target, strict=False))
        return self.partial_credit * hits / max(len(target), len(completion))
