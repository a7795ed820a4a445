"""The models of issue 5 as PyTorch modules with random weights (a fixed seed, so every
process that builds a model gets the same weights): torchvision's ResNet-50, MobileNetV2,
VGG-16 and EfficientNet-B0, a YOLO-style detector (tiny_yolo.py), and Hugging Face's
BertModel and GPT2Model built from their configs (PyTorch modules; no download). Used by export_torch_models.py (to ONNX) and by
compare_peers.py (PyTorch eager and TorchScript run the same modules).

Needs the bench environment: ./scripts/setup_bench.sh (.venv-bench).
"""
import torch

CNNS = ["resnet50", "mobilenetv2", "vgg16", "efficientnet_b0", "yolo"]
TRANSFORMERS = ["bert", "gpt2"]
MODELS = CNNS + TRANSFORMERS
SEED = 20261121


def model_key(name, batch, seq, layers):
    """The file stem of a model's export: every argument that changes the graph."""
    if name in CNNS:
        return f"{name}_n{batch}"
    return f"{name}_l{layers}_s{seq}_n{batch}"


def build(name, batch=1, seq=128, layers=12):
    """Returns (module in eval mode, dict of example inputs by ONNX input name)."""
    torch.manual_seed(SEED)
    if name == "yolo":
        import tiny_yolo

        module = tiny_yolo.TinyYolo().eval()
        return module, {"input": torch.randn(batch, 3, tiny_yolo.SIZE, tiny_yolo.SIZE)}
    if name in CNNS:
        import torchvision.models as tvm_models

        ctor = {"resnet50": tvm_models.resnet50, "mobilenetv2": tvm_models.mobilenet_v2,
                "vgg16": tvm_models.vgg16, "efficientnet_b0": tvm_models.efficientnet_b0}[name]
        module = ctor(weights=None).eval()
        return module, {"input": torch.randn(batch, 3, 224, 224)}
    import transformers

    if name == "bert":
        config = transformers.BertConfig(num_hidden_layers=layers, attn_implementation="eager")
        module = transformers.BertModel(config, add_pooling_layer=False).eval()
        vocab = config.vocab_size
    elif name == "gpt2":
        config = transformers.GPT2Config(n_layer=layers, attn_implementation="eager",
                                         use_cache=False)
        module = transformers.GPT2Model(config).eval()
        vocab = config.vocab_size
    else:
        raise ValueError(f"unknown model {name}; known: {', '.join(MODELS)}")
    ids = torch.randint(0, vocab, (batch, seq), dtype=torch.int64)
    return _LastHiddenState(module), {"input_ids": ids}


class _LastHiddenState(torch.nn.Module):
    """The transformer's last hidden state only, as a plain tensor output (the Hugging Face
    modules return a ModelOutput, which tracing and export would flatten differently)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.is_bert = inner.config.model_type == "bert"

    def forward(self, input_ids):
        # Explicit token types (BERT): the module's default slices a registered buffer
        # through GatherElements on a constant, a detour an exported model need not take.
        kwargs = {"token_type_ids": torch.zeros_like(input_ids)} if self.is_bert else {}
        return self.inner(input_ids=input_ids, use_cache=False, return_dict=True,
                          **kwargs).last_hidden_state
