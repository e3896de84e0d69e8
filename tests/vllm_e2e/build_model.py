"""Build a tiny random-weight Llama and its BPE tokenizer in a directory, with no model hub.

Usage: python build_model.py DIR  (run by the vLLM environment's interpreter: it needs torch,
transformers and tokenizers, which vLLM brings). Deterministic: a fixed seed and corpus.
"""

from __future__ import annotations

import sys
from pathlib import Path

CORPUS = [
    "kernelpolicy decides which kernel runs on this node and why.",
    "The sampler keeps the top k tokens, then the smallest nucleus whose mass reaches p.",
    "An operator switches a bad kernel off without a redeploy.",
    "vLLM and SGLang read environment variables and command-line flags.",
    "One two three four five six seven eight nine ten eleven twelve.",
    "the quick brown fox jumps over the lazy dog again and again",
] * 20


def main() -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    special = ["<unk>", "<s>", "</s>"]
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=special, show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=fast.vocab_size, hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        max_position_embeddings=512, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
        torch_dtype="float32",
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    print(out)


if __name__ == "__main__":
    main()
