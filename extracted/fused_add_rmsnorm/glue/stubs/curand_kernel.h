// astra-sglang stand-in (ours): FlashInfer 0.7.2 headers include curand_kernel.h without using it; empty on purpose.
#pragma once
