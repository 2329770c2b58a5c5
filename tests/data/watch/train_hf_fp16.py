"""A Hugging Face Trainer on CPU through accelerate's fp16 GradScaler path (no download: a tiny BERT
built from a config, called as Trainer calls models, `model(**batch)`).

accelerate refuses fp16 on CPU: `Accelerator.__init__` only builds the GradScaler and turns on
autocast when `self.device.type != "cpu"` (accelerate/accelerator.py, "Mixed precision attributes"),
so with `fp16=True` and `use_cpu=True` the Trainer trains in fp32. `CPUFp16Trainer` does what that
branch does on CUDA, with the CPU device: `native_amp = True` (accelerate then wraps the model's
forward in fp16 autocast in `prepare_model`) and `scaler = torch.amp.GradScaler("cpu")`. Everything
else is the Trainer's and accelerate's own code: `accelerator.backward` scales the loss, the
`AcceleratedOptimizer` calls `scaler.step` and `scaler.update`, clipping unscales first.

The labels are large (up to 3e4), so the scaled gradient into the logits overflows fp16 and most
steps are skipped while the scale falls from 1024. Each step, HF's own view (was the step
skipped, the scale) is printed for the test to compare with amplint's events. HF_OPTIM picks the
optimizer: the Trainer's default `adamw_torch_fused` (a fused optimizer: GradScaler always calls its
step, which skips on the device, so accelerate's `optimizer_step_was_skipped`, set when the step was
not called, stays False even on skipped steps) or `adamw_torch`.
"""
import os

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments


class CPUFp16Trainer(Trainer):
    def create_accelerator_and_postprocess(self):
        super().create_accelerator_and_postprocess()
        assert self.accelerator.mixed_precision == "fp16" and self.accelerator.scaler is None
        self.accelerator.native_amp = True
        self.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)


class Data(torch.utils.data.Dataset):
    def __init__(self, n=96):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 12), generator=g)
        self.labels = torch.rand(n, generator=g) * 3e4

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(12, dtype=torch.long), "labels": self.labels[i]}


class HFView(TrainerCallback):
    trainer = None

    def on_step_end(self, args, state, control, **kwargs):
        acc = self.trainer.accelerator
        print("hf", state.global_step, acc.optimizer_step_was_skipped, acc.scaler.get_scale(), flush=True)
        if state.global_step == 1:
            print("optimizer", type(self.trainer.optimizer.optimizer).__name__, self.trainer.optimizer.optimizer.defaults.get("fused"))


def main(out_dir):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=16, num_labels=1, problem_type="regression")
    args = TrainingArguments(
        output_dir=out_dir, per_device_train_batch_size=8, num_train_epochs=1, learning_rate=1e-3, max_grad_norm=1.0,
        use_cpu=True, fp16=True, report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0, optim=os.environ.get("HF_OPTIM", "adamw_torch_fused"),
    )
    view = HFView()
    trainer = CPUFp16Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Data(), callbacks=[view])
    view.trainer = trainer
    trainer.train()
    print("done")


if __name__ == "__main__":
    main(os.environ.get("HF_OUT", "hf-out"))
