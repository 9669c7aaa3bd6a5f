"""Real inputs in, answers out: an input's declared `preprocess` (images decoded, resized, normalized) and an
output's `postprocess` (softmax/sigmoid, top-k labels, detector boxes, CTC text), drawn on the images by `draw`.
docs/answers.md."""
