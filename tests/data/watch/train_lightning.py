"""A tiny Lightning run in fp16 mixed precision on CPU (GradScaler("cpu")).

    python train_lightning.py [callback]   # `callback`: amplint.watch.LightningCallback instead of `amplint run`

From step 10 on the inputs overflow fp16 in `net.0`, so the loss scale collapses.
"""
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.precision import MixedPrecision
except ImportError:  # pragma: no cover
    import pytorch_lightning as pl
    from pytorch_lightning.plugins.precision import MixedPrecision


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.global_step >= 10 or batch_idx >= 10:
            x = x * 3e4
        loss = nn.functional.mse_loss(self.net(x).float(), y)
        print("loss", loss.item().hex())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def main():
    torch.manual_seed(0)
    x = torch.randn(30 * 8, 16)
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    callbacks = []
    if sys.argv[1:] == ["callback"]:
        import amplint

        callbacks.append(amplint.watch.LightningCallback(os.environ["REPORT_DIR"]))
    trainer = pl.Trainer(
        max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
        plugins=[MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))],
    )
    trainer.fit(Model(), data)
    print("done")


if __name__ == "__main__":
    main()
