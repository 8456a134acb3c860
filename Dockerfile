# The k8sddp training image: the guarded entrypoint around torchrun.
#
#   docker build -t k8sddp-train .
#   docker build --build-arg BASE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime -t k8sddp-train:cuda .
#
# The pod's main process is `k8sddp launch` (docs/runtime.md): it refuses to start without the
# guard variables that `k8sddp render` writes into the manifest (they are deliberately NOT baked
# in here, so a hand-written manifest that lacks them is caught), runs torchrun, and turns the
# workers' outcome into an exit code the operator's restartPolicy: ExitCode understands.
# Render's container command (docs/runtime.md, "The command render uses"):
#   command: [k8sddp, launch, --, torchrun, --nproc-per-node=N, --master-addr=$(MASTER_ADDR),
#             --master-port=$(MASTER_PORT), -m, k8sddp, train, --task, MODULE:ATTR, ARGS...]
ARG BASE=python:3.11-slim
FROM ${BASE}

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# torch: kept from a PyTorch base image when it has one; otherwise the CPU wheel.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN python -c "import torch" 2>/dev/null || pip install --index-url "${TORCH_INDEX}" "torch>=2.2,<3"

COPY . /src
RUN pip install /src && rm -rf /src

# Recorded in every run record (K8SDDP_IMAGE / K8SDDP_CODE_VERSION); set them at build time.
ARG IMAGE_REF=""
ARG CODE_VERSION=""
ENV K8SDDP_IMAGE=${IMAGE_REF} \
    K8SDDP_CODE_VERSION=${CODE_VERSION}

WORKDIR /workspace
ENTRYPOINT ["k8sddp", "launch"]
# torchrun reads --nnodes/--nproc-per-node/--node-rank from the PET_* variables the operator sets.
CMD ["--", "torchrun", "-m", "k8sddp", "train", "--task", "k8sddp.runtime.demo:task"]
