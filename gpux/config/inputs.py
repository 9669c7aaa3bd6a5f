"""The pydantic models of an input's `preprocess:` block: exactly one kind of file per input (an image, raw bytes,
audio or text; docs/answers.md), and what the declared shape and dtype say of it.

Only what gpux.yml alone tells is checked here; the model's real shapes and the tokenizer file are checked when
a session is opened (gpux.answers)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gpux.config.steps import ImageSteps, Strict, _fail, check_image_shape

KINDS = ("image", "bytes", "audio", "text", "python")
FUNCTION = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"  # module:function
FLOATS = ("float16", "float32", "float64")
INTEGERS = {"int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1), "int32": (-2**31, 2**31 - 1),
            "int64": (-2**63, 2**63 - 1), "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1),
            "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1)}


class BytesSteps(Strict):
    """A file's first `head` and last `tail` bytes as one row of byte values (0..255), the gaps padded."""

    head: int = Field(0, ge=0, description="Bytes from the start of the file (after strip), padded at the end "
                      "with pad when the file is shorter.")
    tail: int = Field(0, ge=0, description="Bytes from the end of the file (after strip), padded at the start "
                      "with pad when the file is shorter; they follow the head bytes in the row.")
    block: int | None = Field(None, ge=1, description="Bytes read from each end before strip (default: head, "
                              "resp. tail); e.g. read 4096, strip whitespace, keep 1024.")
    strip: bool = Field(False, description="Strip ASCII whitespace (space, \\t, \\n, \\r, \\v, \\f) from the start "
                        "of the head block and the end of the tail block.")
    pad: int = Field(256, description="The value of padding positions (256: no byte has it).")

    @property
    def size(self) -> int:
        return self.head + self.tail

    @model_validator(mode="after")
    def _sizes(self) -> BytesSteps:
        if self.size == 0:
            raise _fail("head and tail are both 0; read at least one byte", "head")
        if self.block is not None and self.block < max(self.head, self.tail):
            raise _fail(f"block {self.block} is shorter than head/tail {max(self.head, self.tail)}", "block")
        return self


class AudioSteps(Strict):
    """A sound file decoded, mixed to mono, resampled and cut into windows, one batch row each."""

    rate: int = Field(ge=1, description="Sample rate the model takes, in Hz (e.g. 16000).")
    resample: bool = Field(True, description="Resample files at other rates with soxr; false refuses them.")
    window: int | None = Field(None, ge=1, description="Samples per batch row; none: the whole clip is one row.")
    hop: int | None = Field(None, ge=1, description="Samples from one window's start to the next (default: window, "
                            "no overlap).")
    lead: int = Field(0, ge=0, description="Zero samples put before the first one, e.g. the context that the "
                      "first window lacks.")
    last: Literal["pad", "drop"] = Field("pad", description="The last, partial window: pad with zeros, or drop it "
                                         "(a clip shorter than one window is then refused).")

    @model_validator(mode="after")
    def _windows(self) -> AudioSteps:
        if self.window is None and self.hop is not None:
            raise _fail("hop without window; declare the window's length", "hop")
        return self


class TextSteps(Strict):
    """A text tokenized by a tokenizer.json (Hugging Face `tokenizers`): token ids into this input, the attention
    mask and token type ids into the inputs named."""

    tokenizer: str = Field(description="A tokenizer.json, relative to gpux.yml (the `tokenizers` library's file).")
    max_length: int = Field(ge=1, description="Most tokens per text, special tokens included.")
    padding: Literal["max_length", "longest"] = Field(
        "max_length", description="max_length: pad every text to max_length; longest: each text at its own length "
        "(a batch of one).")
    truncation: Literal["error", "warn"] = Field(
        "error", description="A text longer than max_length: error refuses it; warn truncates it with a warning.")
    special_tokens: bool = Field(True, description="Add the tokenizer's special tokens (e.g. [CLS] ... [SEP]).")
    pad_token: str | None = Field(None, description="The token padding positions get (default: the tokenizer's "
                                  "own padding token, else id 0).")
    mask: str | None = Field(None, description="The input that gets the attention mask (1 per token, 0 per pad).")
    type_ids: str | None = Field(None, description="The input that gets the token type ids.")

    @model_validator(mode="after")
    def _two_inputs(self) -> TextSteps:
        if self.mask is not None and self.mask == self.type_ids:
            raise _fail(f"mask and type_ids both name {self.mask!r}; each goes to its own input", "type_ids")
        return self

    @property
    def routes(self) -> dict[str, str]:
        """Other inputs this one fills: input name -> what (mask, type_ids)."""
        return {v: k for k, v in (("mask", self.mask), ("type_ids", self.type_ids)) if v is not None}


class Preprocess(Strict):
    image: ImageSteps | None = Field(None, description="The input is an image file (JPEG, PNG, WebP, BMP, ...) "
                                     "decoded with Pillow, turned upright by its EXIF orientation, resized and "
                                     "normalized.")
    bytes: BytesSteps | None = Field(None, description="The input is any file's raw bytes: its first and last "
                                     "bytes, padded ([batch, head + tail]).")
    audio: AudioSteps | None = Field(None, description="The input is a sound file (WAV, FLAC, OGG, ...) decoded "
                                     "with soundfile, mixed to mono, resampled with soxr, cut into windows "
                                     "([windows, window]).")
    text: TextSteps | None = Field(None, description="The input is text, tokenized by a tokenizer.json "
                                   "([batch, tokens]).")
    python: str | None = Field(None, pattern=FUNCTION, description="module:function, imported from gpux.yml's "
                               "folder: called with the file's bytes (or the object predict is given), returns the "
                               "input's array with its batch axis, or a dict of input name -> array "
                               "(docs/answers.md, Python steps).")

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) is not None)

    @model_validator(mode="after")
    def _one_kind(self) -> Preprocess:
        given = [k for k in KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise _fail(f"expected exactly one of {', '.join(KINDS)}" + (f"; got {', '.join(given)}" if given
                                                                         else ""))
        return self


def check_preprocess(pre: Preprocess, shape: tuple[int | str | None, ...] | None,
                     dtype: str) -> tuple[str, tuple[str, ...]] | None:
    """Why the steps do not fit the input's declared shape or dtype, and where under preprocess (None: they fit)."""
    if pre.python is not None:  # the function's contract: whatever it returns is checked when it runs
        return None
    if pre.image is not None:
        return check_image_shape(pre.image, shape) if shape else None
    if pre.bytes is not None:
        b = pre.bytes
        if dtype not in INTEGERS and dtype not in FLOATS:
            return f"byte values go into an integer or float input, not {dtype}", ("bytes",)
        low, high = INTEGERS.get(dtype, (-2**24, 2**24))  # floats hold every integer up to 2**24
        if not (low <= 0 and high >= 255 and low <= b.pad <= high):
            return f"{dtype} does not hold byte values 0..255 and pad {b.pad}", ("bytes", "pad")
        return _row(shape, b.size, "bytes", "head + tail")
    if pre.audio is not None:
        if dtype not in FLOATS and dtype not in ("int16", "int32"):
            return f"audio samples go into a float, int16 or int32 input, not {dtype}", ("audio",)
        return _row(shape, pre.audio.window, "audio", "window")
    text = pre.text
    assert text is not None
    if dtype not in INTEGERS:
        return f"token ids go into an integer input, not {dtype}", ("text",)
    if text.padding == "longest" and shape and len(shape) == 2 and isinstance(shape[1], int):
        return (f"padding longest gives each text its own length; shape {_show(shape)} fixes {shape[1]}: declare "
                "padding: max_length", ("text", "padding"))
    return _row(shape, text.max_length if text.padding == "max_length" else None, "text", "max_length")


def _row(shape: tuple[int | str | None, ...] | None, size: int | None, kind: str,
         what: str) -> tuple[str, tuple[str, ...]] | None:
    """A [batch, size] input: rows of `size` values (None: any length)."""
    if not shape:
        return None
    if len(shape) != 2:
        return f"a {kind} input is [batch, values]; shape {_show(shape)} has {len(shape)} dims", (kind,)
    if size is not None and isinstance(shape[1], int) and shape[1] != size:
        return f"{what} gives rows of {size}, shape {_show(shape)} takes {shape[1]}", (kind,)
    return None


def check_routes(inputs: dict[str, tuple[Preprocess | None, str]]) -> tuple[str, tuple[str, ...]] | None:
    """Why the inputs a text input routes its mask/type ids to are wrong (name -> (preprocess, dtype))."""
    for name, (pre, _) in inputs.items():
        if pre is None or pre.text is None:
            continue
        for target, what in pre.text.routes.items():
            at = ("inputs", name, "preprocess", "text", what)
            if target == name or target not in inputs:
                others = [n for n in inputs if n != name]
                return f"{target!r} is not another input (inputs: {', '.join(others) or 'none'})", at
            if inputs[target][0] is not None:
                return f"{target!r} has its own preprocess; it cannot also take the {what}", at
            if inputs[target][1] not in INTEGERS:
                return f"{target!r} is {inputs[target][1]}; {what} needs an integer input", at
    return None


def _show(shape: tuple[int | str | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
