"""A small convolutional classifier (written for kernelopt's `kernelopt model` examples).

A stem, two residual stages of 3x3 convolutions with batch norm, global average pooling and a
linear head, on 32x32 images.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
channels = 3
image_size = 32
width = 16
classes = 10


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(x + y)


class Head(nn.Module):
    def __init__(self, channels, classes):
        super().__init__()
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        return self.fc(x.mean(dim=(2, 3)))


class Model(nn.Module):
    def __init__(self, channels, width, classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.stage1 = ResidualBlock(width)
        self.down = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.stage2 = ResidualBlock(2 * width)
        self.head = Head(2 * width, classes)

    def forward(self, x):
        x = self.stage1(self.stem(x))
        x = self.stage2(F.relu(self.down(x)))
        return self.head(x)


def get_inputs():
    return [torch.randn(batch_size, channels, image_size, image_size)]


def get_init_inputs():
    return [channels, width, classes]
