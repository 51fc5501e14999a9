"""Accuracy and binary F1 (positive class 1) of argmax predictions, computed
by hand with numpy as a reference for tests/trainer/trainer_eval_test.cpp.

usage: metrics_reference.py FILE   (each line: the logits of a sample, then its label)
prints: accuracy f1 count
"""
import sys

import numpy as np

rows = np.loadtxt(sys.argv[1], ndmin=2)
logits, labels = rows[:, :-1], rows[:, -1].astype(np.int64)
predicted = logits.argmax(axis=1)
accuracy = float((predicted == labels).mean())
true_positives = int(((predicted == 1) & (labels == 1)).sum())
precision = true_positives / max(int((predicted == 1).sum()), 1)
recall = true_positives / max(int((labels == 1).sum()), 1)
f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
print(repr(accuracy), repr(f1), len(labels))
