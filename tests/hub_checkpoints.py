"""Tiny transformers checkpoints made here (seeded weights, a word-level tokenizer trained on a few sentences) and
a Hugging Face Hub cache laid out as huggingface_hub reads it (`models--ORG--NAME/snapshots/REV/...`, `refs/main`),
for tests that run offline (HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

CORPUS = ["a man is playing a guitar on the stage", "the weather is lovely today", "where is the nearest train station",
          "she read the letter twice before she understood what it meant", "a good film", "a bad movie",
          "stocks fell sharply after the bank raised rates"]
LABELS = {0: "negative", 1: "positive", 2: "neutral"}
ENTITIES = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}  # BIO tags, as NER checkpoints name them
CLASSES = {0: "cat", 1: "astronaut", 2: "coffee", 3: "rocket", 4: "motorcycle"}


def tokenizer(out: Path, pieces: bool = False) -> int:
    """A word-level tokenizer.json ([CLS] text [SEP], lower-cased), or with `pieces` BERT's WordPiece of a small
    vocabulary (words split into ## pieces), and the files transformers' tokenizer reads; returns the vocabulary's
    size."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    if pieces:
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=60, special_tokens=special))
    else:
        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(special_tokens=special))
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2),
                                                                                                ("[SEP]", 3)])
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", model_max_length=48)
    fast.save_pretrained(str(out))
    return tok.get_vocab_size()


def checkpoint(out: Path, kind: str, seed: int = 0, pooling: str = "mean", normalize: bool = True) -> Path:
    """kind: `st` (a BERT sentence encoder with sentence-transformers' modules.json and 1_Pooling), `cls` (a BERT
    text classifier, id2label), `tok` (a BERT token classifier, BIO labels; `tok_pieces`: with a WordPiece
    tokenizer), `distil` (a DistilBERT encoder, no
    token type ids, no modules.json)."""
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertForTokenClassification,
        BertModel,
        DistilBertConfig,
        DistilBertModel,
    )

    out.mkdir(parents=True, exist_ok=True)
    vocab = tokenizer(out, pieces=kind == "tok_pieces")
    kind = "tok" if kind == "tok_pieces" else kind
    torch.manual_seed(seed)
    if kind == "distil":
        model = DistilBertModel(DistilBertConfig(vocab_size=vocab, dim=32, n_layers=2, n_heads=2, hidden_dim=37,
                                                 max_position_embeddings=64))
    else:
        config = BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=37, max_position_embeddings=64,
                            **({"id2label": LABELS} if kind == "cls" else {"id2label": ENTITIES} if kind == "tok"
                               else {}))
        model = {"cls": BertForSequenceClassification, "tok": BertForTokenClassification}.get(kind, BertModel)(config)
    model.eval().save_pretrained(str(out))
    if kind == "st":
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        if normalize:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
        (out / "modules.json").write_text(json.dumps(modules))
        (out / "1_Pooling").mkdir(exist_ok=True)
        (out / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                   f"pooling_mode_{pooling}_token"
                                                                   if pooling == "cls" else
                                                                   f"pooling_mode_{pooling}_tokens": True}))
        (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 40}))
    return out


def image_checkpoint(out: Path, kind: str = "vit", seed: int = 0) -> Path:
    """A tiny image classifier with seeded weights and its image processor's preprocessor_config.json: `vit` (a ViT
    at 32x32, resized to exactly that, bilinear, mean and std 0.5) or `convnext` (a ConvNext whose processor resizes
    the shorter side to 32 / crop_pct and crops 32x32, bicubic, ImageNet's mean and std)."""
    import torch
    from transformers import (
        ConvNextConfig,
        ConvNextForImageClassification,
        ConvNextImageProcessor,
        ViTConfig,
        ViTForImageClassification,
        ViTImageProcessor,
    )

    torch.manual_seed(seed)
    if kind == "vit":
        model = ViTForImageClassification(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                                    num_attention_heads=2, intermediate_size=37, id2label=CLASSES))
        processor = ViTImageProcessor(size={"height": 32, "width": 32})
    else:
        model = ConvNextForImageClassification(ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2,
                                                              id2label=CLASSES))
        processor = ConvNextImageProcessor(size={"shortest_edge": 32}, crop_pct=0.875)
    with torch.no_grad():
        model.classifier.weight *= 40  # confident answers: a few classes well apart, not five near 0.2
    model.eval().save_pretrained(str(out))
    processor.save_pretrained(str(out))
    return out


def place(cache: Path, repo: str, files: Path, revision: str, *, main: bool = True) -> Path:
    """`files` as the cache's snapshot of `repo` at `revision` (refs/main pointed at it unless `main` is False)."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    snap = folder / "snapshots" / revision
    shutil.copytree(files, snap, dirs_exist_ok=True)
    if main:
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / "main").write_text(revision)
    return snap


def sentence_embedding(folder: Path, text: str, pooling: str = "mean", normalize: bool = True) -> list[float]:
    """What sentence-transformers computes: the encoder run by transformers on the tokenizer's ids, then its pooling
    over the attention mask (models.Pooling) and L2 normalisation (models.Normalize)."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel

    enc = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text)
    model = AutoModel.from_pretrained(str(folder)).eval()
    ids, mask = torch.tensor([enc.ids]), torch.tensor([enc.attention_mask])
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in model.forward.__code__.co_varnames:
        feeds["token_type_ids"] = torch.tensor([enc.type_ids])
    with torch.no_grad():
        hidden = model(**feeds).last_hidden_state
    m = mask.unsqueeze(-1).float()
    pooled = hidden[:, 0] if pooling == "cls" else (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return (torch.nn.functional.normalize(pooled, dim=1) if normalize else pooled)[0].tolist()
