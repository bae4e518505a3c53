"""The decoding loop: sampling rules, lossless acceptance, window control."""
