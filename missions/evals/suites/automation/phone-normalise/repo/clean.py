"""Phone numbers to E.164: +CC then digits. National (UK) numbers start with 0."""

import re


def e164(raw):
    digits = re.sub(r"[^\d+]", "", raw)
    if digits.startswith("+"):
        return digits
    if digits.startswith("00"):
        return "+" + digits[2:]
    if digits.startswith("0"):
        return "+44" + digits
    raise ValueError(f"not a phone number: {raw!r}")
