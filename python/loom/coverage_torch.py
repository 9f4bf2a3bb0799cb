"""The coverage report's plain torch.nn family: models written with torch.nn alone (no transformers), each built
small and traced the way a transformers class is (`python -m loom.coverage --family torch-nn`).

MODELS maps a name to a builder returning (model in training mode, example inputs, loss(outputs, batch)). The
sizes follow the transformers classes' shrunk configs: hidden 64, 4 heads, 2 layers, 16 tokens, batch 2,
vocabulary 512 (images 8 of 3x32x32).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SEQ, VOCAB, HIDDEN, HEADS, CLASSES = 2, 16, 512, 64, 4, 10


def _tokens(generator, *shape):
    return torch.randint(0, VOCAB, shape, generator=generator)


def _token_loss(outputs, batch):
    return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), batch["labels"].reshape(-1))


def _class_loss(outputs, batch):
    return F.cross_entropy(outputs, batch["labels"])


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(HIDDEN, 2 * HIDDEN), nn.GELU(), nn.Dropout(0.1),
                                    nn.Linear(2 * HIDDEN, CLASSES))

    def forward(self, x):
        return self.layers(x)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class EncoderLM(nn.Module):
    """nn.TransformerEncoder over token embeddings, causal, predicting each next token."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, 2 * HIDDEN, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, input_ids):
        mask = nn.Transformer.generate_square_subsequent_mask(input_ids.shape[1])
        return self.head(self.encoder(self.embed(input_ids), mask=mask, is_causal=True))


class Seq2Seq(nn.Module):
    """nn.Transformer (encoder and decoder), the decoder causal."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.transformer = nn.Transformer(HIDDEN, HEADS, 2, 2, 2 * HIDDEN, dropout=0.0, batch_first=True)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, input_ids, decoder_input_ids):
        mask = nn.Transformer.generate_square_subsequent_mask(decoder_input_ids.shape[1])
        hidden = self.transformer(self.embed(input_ids), self.embed(decoder_input_ids), tgt_mask=mask,
                                  tgt_is_causal=True)
        return self.head(hidden)


class AttentionClassifier(nn.Module):
    """nn.MultiheadAttention over embeddings, mean-pooled into a class."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.attention = nn.MultiheadAttention(HIDDEN, HEADS, batch_first=True)
        self.norm = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        attended, _ = self.attention(x, x, x, need_weights=False)
        return self.head(self.norm(x + attended).mean(dim=1))


class LSTMClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.lstm = nn.LSTM(HIDDEN, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, input_ids):
        output, _ = self.lstm(self.embed(input_ids))
        return self.head(output[:, -1])


def _mlp():
    g = torch.Generator().manual_seed(0)
    return MLP(), {"x": torch.randn(8, HIDDEN, generator=g), "labels": torch.randint(0, CLASSES, (8,), generator=g)}


def _conv_net():
    g = torch.Generator().manual_seed(0)
    return ConvNet(), {"x": torch.randn(8, 3, 32, 32, generator=g),
                       "labels": torch.randint(0, CLASSES, (8,), generator=g)}


def _encoder_lm():
    g = torch.Generator().manual_seed(0)
    ids = _tokens(g, BATCH, SEQ + 1)
    return EncoderLM(), {"input_ids": ids[:, :-1], "labels": ids[:, 1:].contiguous()}


def _seq2seq():
    g = torch.Generator().manual_seed(0)
    target = _tokens(g, BATCH, SEQ // 2 + 1)
    return Seq2Seq(), {"input_ids": _tokens(g, BATCH, SEQ), "decoder_input_ids": target[:, :-1],
                       "labels": target[:, 1:].contiguous()}


def _sequence_classifier(cls):
    def build():
        g = torch.Generator().manual_seed(0)
        return cls(), {"input_ids": _tokens(g, BATCH, SEQ), "labels": torch.randint(0, CLASSES, (BATCH,), generator=g)}
    return build


def _seeded(build, loss):
    def make():
        torch.manual_seed(0)
        model, inputs = build()
        return model.train(), inputs, loss
    return make


MODELS = {
    "MLP": _seeded(_mlp, _class_loss),
    "ConvNet": _seeded(_conv_net, _class_loss),
    "TransformerEncoderLM": _seeded(_encoder_lm, _token_loss),
    "TransformerSeq2Seq": _seeded(_seq2seq, _token_loss),
    "MultiheadAttentionClassifier": _seeded(_sequence_classifier(AttentionClassifier), _class_loss),
    "LSTMClassifier": _seeded(_sequence_classifier(LSTMClassifier), _class_loss),
}
