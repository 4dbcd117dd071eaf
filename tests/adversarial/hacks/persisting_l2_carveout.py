# problem: L2ReusedWeight
# expect-status: correct
# speedup-max: 1.3
# marker: gpu
# family: persisting-L2 carve-outs (GPU)
# why: at import, sets aside the most L2 the device allows for persisting accesses and marks its
#   own stream's reads of the weight persisting, then computes the problem exactly. The weight then
#   stays in L2 from one of its calls to the next, and the persisting lines it leaves behind hold
#   the set-aside part of L2 while the reference runs, whose own weight must then come from DRAM
#   more often. The trusted keeper resets every persisting line to normal before each window, so
#   each side starts its call with the whole L2 as the other left it, and the carve-out gains nothing
import ctypes

import torch
import torch.nn as nn

_MAX_PERSISTING_L2_CACHE_SIZE = 108  # CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE
_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
_ACCESS_POLICY_WINDOW = 1  # CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW
_PERSISTING, _STREAMING = 2, 1  # CUaccessProperty


class _Window(ctypes.Structure):  # CUaccessPolicyWindow
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _Value(ctypes.Union):  # CUstreamAttrValue (CUlaunchAttributeValue: 64 bytes)
    _fields_ = [("accessPolicyWindow", _Window), ("pad", ctypes.c_char * 64)]


def _persist(tensor: torch.Tensor, stream: torch.cuda.Stream) -> None:
    driver = ctypes.CDLL("libcuda.so.1")
    torch.cuda.init()
    largest, device = ctypes.c_int(), ctypes.c_int()
    driver.cuCtxGetDevice(ctypes.byref(device))
    driver.cuDeviceGetAttribute(ctypes.byref(largest), _MAX_PERSISTING_L2_CACHE_SIZE, device)
    driver.cuCtxSetLimit(_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(largest.value))
    value = _Value()
    value.accessPolicyWindow = _Window(tensor.data_ptr(), tensor.numel() * tensor.element_size(), 1.0,
                                       _PERSISTING, _STREAMING)
    driver.cuStreamSetAttribute(ctypes.c_void_p(stream.cuda_stream), _ACCESS_POLICY_WINDOW, ctypes.byref(value))


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, features) / features ** 0.5)
        self.stream = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stream is None:
            self.stream = torch.cuda.Stream()
            _persist(self.weight, self.stream)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for _ in range(4):
                x = torch.tanh(x @ self.weight.t())
        torch.cuda.current_stream().wait_stream(self.stream)
        return x
