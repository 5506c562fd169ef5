"""Images without a registry: a busybox + host-python base, the stand-in server, shipped to every engine."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.testbed import layout

RECIPE = "testbed-base/2"  # bump when the image's layout below changes
STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "config-3.11-x86_64-linux-gnu"}
STANDIN_DIR = layout.REPO_ROOT / "images" / "standin"


def docker_cli() -> str:
    # The distribution's client matches its dockerd's API and builds without the buildx warning.
    return "/usr/bin/docker" if Path("/usr/bin/docker").exists() else shutil.which("docker") or "docker"


def docker(socket: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    argv = [docker_cli(), "-H", f"unix://{socket}", *args]
    return subprocess.run(argv, capture_output=True, check=True, **kwargs)


def image_hash(socket: Path, image: str) -> str | None:
    """The content-hash label of an image in an engine, None when absent."""
    result = subprocess.run(
        [docker_cli(), "-H", f"unix://{socket}", "image", "inspect", "--format",
         "{{index .Config.Labels \"%s\"}}" % layout.HASH_LABEL, image],
        capture_output=True, text=True,
    )
    return result.stdout.strip() if result.returncode == 0 else None


def python_files() -> list:
    """(path inside the image, path on this machine) for python3, its stdlib and every library it loads."""
    python = Path(os.path.realpath("/usr/bin/python3"))
    stdlib = Path(f"/usr/lib/python{sys.version_info.major}.{sys.version_info.minor}")
    stdlib = Path(f"/usr/lib/{python.name}") if python.name.startswith("python") else stdlib
    files = [(str(python), python)]
    for dirpath, dirnames, filenames in os.walk(stdlib):
        dirnames[:] = sorted(d for d in dirnames if d not in STDLIB_SKIP and d != "site-packages")
        files += [(os.path.join(dirpath, f), Path(dirpath, f)) for f in sorted(filenames)]
    objects = [str(python)] + [p for _, p in files if str(p).endswith(".so")]
    ldd = subprocess.run(["ldd", *map(str, objects)], capture_output=True, text=True).stdout
    libraries = set()
    for line in ldd.splitlines():
        words = line.split()
        if "=>" in words and len(words) > words.index("=>") + 1 and words[words.index("=>") + 1].startswith("/"):
            libraries.add(words[words.index("=>") + 1])
        elif words and words[0].startswith("/") and not words[0].endswith(":"):
            libraries.add(words[0])  # the dynamic loader line
    return files, sorted(libraries), python


def base_hash() -> str:
    files, libraries, _ = python_files()
    digest = hashlib.sha256(RECIPE.encode())
    for _, source in files + [(lib, Path(lib)) for lib in libraries] + [("busybox", Path(busybox()))]:
        info = source.stat()
        digest.update(f"{source}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def busybox() -> str:
    found = shutil.which("busybox")
    if found is None:
        raise RuntimeError("busybox not found: apt-get install busybox-static")
    return found


def _usr(path: str) -> str:
    # Merged /usr in the image: /lib/x -> /usr/lib/x, so one copy of each file.
    for top in ("/lib64/", "/lib/", "/bin/", "/sbin/"):
        if path.startswith(top):
            return "/usr" + path
    return path


def base_tar() -> bytes:
    """The root filesystem of the base image, as a tar archive."""
    files, libraries, python = python_files()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        def directory(name, mode=0o755):
            info = tarfile.TarInfo(name.lstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        def symlink(name, target):
            info = tarfile.TarInfo(name.lstrip("/"))
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)

        def text(name, content):
            data = content.encode()
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))

        for name in ("/usr", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/etc", "/root", "/var",
                     "/srv", "/opt", "/usr/local", "/usr/local/bin"):
            directory(name)
        directory("/tmp", 0o1777)
        for top in ("bin", "sbin", "lib", "lib64"):
            symlink(top, f"usr/{top}")
        added = set()
        for inside, source in files + [(lib, Path(lib)) for lib in libraries]:
            name = _usr(os.path.realpath(inside) if inside in libraries else inside)
            if name not in added:
                added.add(name)
                tar.add(os.path.realpath(source), arcname=name.lstrip("/"), recursive=False)
            if inside in libraries and _usr(inside) != name and _usr(inside) not in added:
                added.add(_usr(inside))
                symlink(_usr(inside), name)
        tar.add(os.path.realpath(busybox()), arcname="usr/bin/busybox")
        applets = subprocess.run([busybox(), "--list"], capture_output=True, text=True).stdout.split()
        for applet in applets:
            if applet not in ("busybox",) and f"/usr/bin/{applet}" not in added:
                symlink(f"/usr/bin/{applet}", "busybox")
        symlink("/usr/bin/python3", python.name)
        symlink("/usr/bin/python", python.name)
        text("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
        text("/etc/group", "root:x:0:\nnogroup:x:65534:\n")
    return buffer.getvalue()


def standin_hash(base: str) -> str | None:
    if not (STANDIN_DIR / "Dockerfile").exists():
        return None
    digest = hashlib.sha256(base.encode())
    for dirpath, dirnames, filenames in os.walk(STANDIN_DIR):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath, name)
            digest.update(str(path.relative_to(STANDIN_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def standin_versions() -> tuple[tuple[str, ...], str]:
    """(every vllm-ascend release the stand-in plays, the newest), read from the stand-in's own table
    (images/standin/standin/versions.py, standard library only) so the two never disagree."""
    name = "deployctl_testbed_standin_versions"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, STANDIN_DIR / "standin" / "versions.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return tuple(module.RELEASES), module.NEWEST


def standin_images(content: str) -> dict:
    """{image: content hash} of the stand-in: one tag per release (the build argument differs, the layers are the
    same), and `latest` for the newest (the same image as its version tag)."""
    versions, newest = standin_versions()
    wanted = {}
    for version in versions:
        tagged = hashlib.sha256(f"{content}\0{version}".encode()).hexdigest()[:16]
        wanted[layout.standin_image(version)] = tagged
        if version == newest:
            wanted[layout.STANDIN_IMAGE] = tagged
    return wanted


def wanted_hashes() -> dict:
    """{image: content hash} the bed's engines must hold."""
    base = base_hash()
    wanted = {layout.BASE_IMAGE: base}
    standin = standin_hash(base)
    if standin is not None:
        wanted.update(standin_images(standin))
    from tests.testbed import router_image

    from tests.testbed import sglang_router_image

    for module in (router_image, sglang_router_image):  # the real routers, for a mixed deployment's front
        router = module.content_hash(base)
        if router is not None:
            wanted[module.IMAGE] = router
    return wanted


def build_on(socket: Path, wanted: dict | None = None) -> dict:
    """Make sure one engine holds the base and every stand-in image; return {image: hash} it holds. Each release's
    build reuses the previous one's layers (the version is the Dockerfile's last, metadata-only, instruction)."""
    wanted = wanted or wanted_hashes()
    base = wanted[layout.BASE_IMAGE]
    if image_hash(socket, layout.BASE_IMAGE) != base:
        docker(socket, "import", "--change", f"LABEL {layout.HASH_LABEL}={base}",
               "--change", 'CMD ["/bin/sh"]', "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "-", layout.BASE_IMAGE, input=base_tar())
    from tests.testbed import router_image, sglang_router_image

    for module in (router_image, sglang_router_image):
        if module.IMAGE in wanted and image_hash(socket, module.IMAGE) != wanted[module.IMAGE]:
            module.build(socket, wanted[module.IMAGE], python_files()[1])
    if layout.STANDIN_IMAGE not in wanted:
        return wanted
    versions, newest = standin_versions()
    for version in versions:
        tags = [layout.standin_image(version)] + ([layout.STANDIN_IMAGE] if version == newest else [])
        content = wanted[tags[0]]
        if all(image_hash(socket, tag) == content for tag in tags):
            continue
        docker(socket, "build", "-q", "--label", f"{layout.HASH_LABEL}={content}",
               "--build-arg", f"BASE_IMAGE={layout.BASE_IMAGE}", "--build-arg",
               f"STANDIN_VLLM_ASCEND_VERSION={version}", *(word for tag in tags for word in ("-t", tag)),
               str(STANDIN_DIR))
    return wanted


def lacking(sockets: list, wanted: dict) -> list:
    """The engines that lack one of the wanted images (by hash label); asked in parallel."""
    def lacks(socket: Path) -> bool:
        return any(image_hash(socket, image) != h for image, h in wanted.items())

    with ThreadPoolExecutor(max_workers=8) as pool:
        return [s for s, missing in zip(sockets, pool.map(lacks, sockets)) if missing]


def ship(source: Path, targets: list, wanted: dict) -> None:
    """Copy the images an engine lacks (by hash label) from the source engine, in parallel."""
    needy = lacking(targets, wanted)
    if not needy:
        return
    bundle = layout.state_dir() / "images" / "bundle.tar"
    bundle.parent.mkdir(parents=True, exist_ok=True)
    docker(source, "save", "-o", str(bundle), *wanted)

    def load(target: Path) -> None:
        with open(bundle, "rb") as stream:
            docker(target, "load", "-q", stdin=stream)

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(load, needy))
    bundle.unlink()


# -- the engine cache: image stores shared by hard links --------------------------------------------
# `docker load` of ~50 MB into each of N engines costs ~1 s CPU apiece. Instead, once per content hash, the
# image part of an engine's data root (image/ + overlay2/, written only by `docker load`) is copied into the
# cache dir, and each new host's data root starts as hard links to it before its dockerd starts. That is safe
# because image layers are never written after commit: containers write their own upper dirs (overlayfs copy-up),
# and `docker rmi` only unlinks the host's own names. The labels are still checked after start (ship()).
ENGINE_PARTS = ("image", "overlay2")


def engine_key(wanted: dict) -> str:
    """The cache entry's name: the images' content hashes and the dockerd binary (its on-disk format)."""
    dockerd = Path(shutil.which("dockerd") or "/usr/bin/dockerd")
    info = dockerd.stat() if dockerd.exists() else None
    digest = hashlib.sha256(f"{sorted(wanted.items())}\0{dockerd}\0{info and info.st_size}\0"
                            f"{info and info.st_mtime_ns}".encode())
    return "engine-" + digest.hexdigest()[:16]


def seed_engine(data_root: Path, key: str) -> bool:
    """Hard-link a cached image store into an engine's (empty, stopped) data root; False when not cached."""
    template = layout.cache_dir() / key
    if not template.is_dir():
        return False
    data_root.mkdir(parents=True, exist_ok=True)
    linked = subprocess.run(["cp", "-al", f"{template}/.", str(data_root)], capture_output=True)
    if linked.returncode != 0:  # e.g. the cache on another filesystem: a plain copy still beats docker load
        subprocess.run(["cp", "-a", f"{template}/.", str(data_root)], capture_output=True, check=True)
    return True


def save_engine(data_root: Path, key: str) -> None:
    """Copy an engine's image store (one that only `docker load` wrote) into the cache; drop older entries."""
    cache = layout.cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f"{key}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    subprocess.run(["cp", "-a", *(str(data_root / part) for part in ENGINE_PARTS), str(tmp)],
                   capture_output=True, check=True)
    shutil.rmtree(tmp / "image" / "overlay2" / "layerdb" / "mounts", ignore_errors=True)  # containers: none
    try:
        os.rename(tmp, cache / key)  # atomic: a bed starting now sees the whole entry or none
    except OSError:  # another bed saved it first
        shutil.rmtree(tmp, ignore_errors=True)
    for old in cache.glob("engine-*"):
        if old.name != key:
            shutil.rmtree(old, ignore_errors=True)
