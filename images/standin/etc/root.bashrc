# root's ~/.bashrc in the stand-in image: what the vllm-ascend images append to it (Dockerfile.a3 v0.23.0:77-78,
# v0.18.0:98-99; the /usr/local/lib line from vllm-ascend #6976, the fix of #6949). The stand-in leaves out the
# jemalloc LD_PRELOAD line: it has no jemalloc.
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/lib
