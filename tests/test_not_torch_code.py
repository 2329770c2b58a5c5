"""Files whose tensors cannot be PyTorch tensors (TensorFlow, JAX/Flax) pass no rule's gate
(`core/gating.py`'s `not_torch_code`): a library's `modeling_tf_*.py` next to its torch models.
A numpy-only helper still may operate on torch tensors its callers hand it."""
from __future__ import annotations

import pytest

from amplint import Config, lint_paths
from amplint.core.gating import not_torch_code

TF_MODEL = """\
import tensorflow as tf


class TFAttention(tf.keras.layers.Layer):
    def call(self, scores, mask):
        bias = self.bias
        bias.fill_(-1e9)
        return tf.nn.softmax(scores + bias, axis=-1)
"""
TRAIN = "import torch\n\nmodel = build().half()\n"


@pytest.mark.parametrize(
    "source",
    [
        "import tensorflow as tf\nx = tf.where(m, s, -1e9)\n",
        "from tensorflow.keras import layers\n",
        "import jax\nimport jax.numpy as jnp\nimport flax.linen as nn\n",
        "from jax import numpy as jnp\n",
        "import paddle\n",
    ],
)
def test_not_torch_code(source):
    assert not_torch_code(source)


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nimport tensorflow as tf\n",  # both: the torch tensors may be under AMP
        "import tensorflow as tf\nimport torch.nn as nn\n",
        "def f(x, m):\n    return x.masked_fill(m, -1e9)\n",  # no import: a torch helper, maybe
        "import numpy as np\nfrom .utils import pad\n",  # a project module may hand it torch tensors
        "import numpy as np\nfrom helpers import *\n",  # a star import may bring torch (issue 22, 7)
        "import numpy as np\nimport transformers\n",
        "import numpy as np\nfrom models.layers import Attention\n",
        "x = 1\n",
        "import numpy as np\n\ndef pad_mask(scores, mask):\n    return scores.masked_fill(mask, -1e9)\n",
        "import os, numpy as np\n",
    ],
)
def test_maybe_torch_code(source):
    assert not not_torch_code(source)


@pytest.mark.parametrize("header", ["import tensorflow as tf", "import jax.numpy as jnp\nimport tensorflow as tf", "import numpy as np\nimport tensorflow as tf"])
def test_a_tensorflow_file_of_an_fp16_project_is_silent(tmp_path, header):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "modeling_tf_attention.py").write_text(TF_MODEL.replace("import tensorflow as tf", header))
    assert [d.code for d in lint_paths([str(tmp_path)], Config()).diagnostics] == []


def test_the_torch_twin_is_reported(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "modeling_attention.py").write_text(TF_MODEL.replace("import tensorflow as tf", "import torch\nimport tensorflow as tf"))
    assert [d.code for d in lint_paths([str(tmp_path)], Config()).diagnostics] == ["AMP301"]
