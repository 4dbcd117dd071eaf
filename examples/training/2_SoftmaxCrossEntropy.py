import torch
import torch.nn as nn

# A classifier's loss: log-softmax over the vocabulary, then the mean negative log-likelihood
# of integer targets, judged as a training step (the loss and the gradient of the logits; the
# targets are integers and have none). The reference builds the whole log-probability matrix
# and keeps it for the backward; the gradient of the mean loss is (softmax - one_hot) / rows.
PASS = "both"

batch_size = 128
vocab = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        log_probs = torch.log_softmax(logits, dim=-1)
        return -log_probs.gather(1, targets.unsqueeze(1)).mean()


def get_inputs():
    return [torch.randn(batch_size, vocab), torch.randint(0, vocab, (batch_size,))]


def get_init_inputs():
    return []
