"""Lookahead predictor training by self-distillation: the corpus (`lopa build-corpus`) and the trainer (`lopa train-heads`)."""
