"""TRL's SFTTrainer on CPU: tiny Llama from a config, a word-level tokenizer built
locally (no download), a pre-tokenized dataset of random token ids.

Writes truth.jsonl (cwd) from a TrainerCallback.on_log (state.global_step, raw values,
values as the ProgressCallback prints them: floats f"{v:.4g}", total_flos dropped).
"""

import json
import random
import shutil

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast, TrainerCallback
from trl import SFTConfig, SFTTrainer

torch.manual_seed(0)
random.seed(0)
vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2} | {f"w{i}": i for i in range(3, 128)}
tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(
    tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
)
cfg = LlamaConfig(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    intermediate_size=64,
    max_position_embeddings=128,
    pad_token_id=0,
    eos_token_id=1,
)
model = AutoModelForCausalLM.from_config(cfg)
ids = [[random.randrange(3, 128) for _ in range(random.randint(8, 48))] + [1] for _ in range(400)]
train = Dataset.from_dict({"input_ids": ids})


def printed(v):
    return f"{v:.4g}" if isinstance(v, float) else v


class Truth(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = {k: v for k, v in logs.items() if k != "total_flos"}
        summary = "train_runtime" in logs and "train_loss" in logs
        rec = {
            "kind": "summary" if summary else "train",
            "step": state.global_step,
            "values": logs,
            "printed": {k: printed(v) for k, v in logs.items()},
        }
        with open("truth.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")


args = SFTConfig(
    output_dir="out",
    per_device_train_batch_size=4,
    max_steps=120,
    logging_steps=2,
    learning_rate=1e-3,
    save_strategy="no",
    report_to="none",
    disable_tqdm=False,
    use_cpu=True,
    seed=42,
)
trainer = SFTTrainer(
    model=model, args=args, train_dataset=train, processing_class=tokenizer, callbacks=[Truth()]
)
trainer.train()
trainer.state.save_to_json("trainer_state.json")
shutil.rmtree("out", ignore_errors=True)
