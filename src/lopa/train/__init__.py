"""Lookahead-head training by self-distillation (`lopa train-heads`)."""
