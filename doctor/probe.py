#!/usr/bin/env python3
"""qwenref doctor's probe: will transformers' Qwen3.5/3.6 linear-attention layers take their fast path here?

Run it with the interpreter your training or inference job uses, exactly as that job runs it
(same virtualenv, PYTHONPATH and user site-packages):

    python3 -B probe.py [--model-config DIR_OR_CONFIG_JSON] [--out FILE]

It prints one JSON object (or writes it to --out) and exits 0; a non-zero exit means the probe
itself broke. It installs nothing and imports only what transformers would import to decide:
torch (for CUDA), and the kernel packages (fla, causal_conv1d) when they are installed.
transformers itself is never imported: its source is read and parsed, so the decision follows
the installed version's own rules.

Two rules exist across transformers versions:
  * per-function fallback (5.17): each of causal_conv1d_fn, causal_conv1d_update,
    chunk_gated_delta_rule and fused_recurrent_gated_delta_rule is decorated with
    use_kernel_func_from_hub_with_fallback(name, package); at import transformers imports the
    package, looks the function up (resolve_internal_import, then package.<internal path>) and
    keeps its torch reference when anything fails. There is no CUDA check.
  * the older fast-path gate (5.3 and before): imports under is_causal_conv1d_available() /
    is_flash_linear_attention_available() (both need CUDA), and is_fast_path_available only when
    all four functions are there.
"""

import argparse
import ast
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

SCHEMA = 1
KERNELS = ("causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule")
PACKAGES = ("torch", "transformers", "fla", "causal_conv1d", "kernels", "triton")
# Distributions that ship an import name, where they differ (fla: fla-core holds fla.ops).
DISTRIBUTIONS = {
    "fla": ("fla-core", "flash-linear-attention"),
    "causal_conv1d": ("causal-conv1d",),
}
# transformers 5.17's defaults, used only when its integrations/hub_kernels.py cannot be parsed.
DEFAULT_INTERNAL_PATHS = {
    "chunk_gated_delta_rule": "ops.gated_delta_rule",
    "fused_recurrent_gated_delta_rule": "ops.gated_delta_rule",
}
TRUE_VALUES = ("1", "ON", "YES", "TRUE")

warnings = []


def describe(exc):
    text = "%s: %s" % (type(exc).__name__, exc)
    return text if len(text) <= 400 else text[:400] + "..."


def find_spec(name):
    """The import spec of a top-level module, without importing it (None when absent or broken)."""
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError) as e:
        warnings.append("find_spec(%r) failed: %s" % (name, describe(e)))
        return None


def spec_location(spec):
    if spec is None:
        return None
    if spec.submodule_search_locations:
        locations = list(spec.submodule_search_locations)
        if locations:
            return locations[0]
    return spec.origin


def dist_version(name):
    try:
        from importlib import metadata
    except ImportError:
        return None
    try:
        return metadata.version(name)
    except Exception:
        return None


def package_version(pkg):
    """The installed version of an import name, read from distribution metadata as transformers does."""
    try:
        from importlib import metadata
        mapping = metadata.packages_distributions() if hasattr(metadata, "packages_distributions") else {}
    except Exception:
        mapping = {}
    names = list(mapping.get(pkg, ()))
    normalized = pkg.replace("_", "-")
    # transformers' _is_package_available: prefer the normalized name, then the import name, then the first.
    ordered = [n for n in (normalized, pkg) if n in names] + names
    for extra in DISTRIBUTIONS.get(pkg, ()) + (normalized, pkg):
        if extra not in ordered:
            ordered.append(extra)
    for name in ordered:
        v = dist_version(name)
        if v is not None:
            return v, name
    return None, None


def packages_info():
    out = {}
    for pkg in PACKAGES:
        spec = find_spec(pkg)
        version, dist = package_version(pkg) if spec is not None else (None, None)
        entry = {"installed": spec is not None, "version": version, "distribution": dist,
                 "location": spec_location(spec)}
        if pkg in DISTRIBUTIONS:
            entry["distributions"] = {d: dist_version(d) for d in DISTRIBUTIONS[pkg] if dist_version(d)}
        out[pkg] = entry
    return out


def version_tuple(text):
    parts = []
    for piece in re.split(r"[.+-]", text or ""):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
    return tuple(parts)


def cuda_info(torch_installed):
    info = {"torch_imported": False, "torch_cuda": None, "torch_hip": None, "available": False,
            "device_count": 0, "devices": [], "arch_list": [], "error": None}
    if torch_installed:
        try:
            import torch
            info["torch_imported"] = True
            info["torch_cuda"] = getattr(torch.version, "cuda", None)
            info["torch_hip"] = getattr(torch.version, "hip", None)
            info["available"] = bool(torch.cuda.is_available())
            if info["available"]:
                n = int(torch.cuda.device_count())
                info["device_count"] = n
                for i in range(n):
                    major, minor = torch.cuda.get_device_capability(i)
                    info["devices"].append({"name": str(torch.cuda.get_device_name(i)),
                                            "capability": "%d.%d" % (major, minor)})
            info["arch_list"] = [str(a) for a in torch.cuda.get_arch_list()]
        except Exception as e:
            info["error"] = describe(e)
    info.update(nvcc_info())
    for dev in info["devices"]:
        sm = "sm_" + dev["capability"].replace(".", "")
        if info["arch_list"] and sm not in info["arch_list"] and not any(
                a.startswith("compute_") for a in info["arch_list"]):
            warnings.append("this torch build has no kernels for %s (%s); its arch list is %s"
                            % (dev["name"], sm, " ".join(info["arch_list"])))
    return info


def nvcc_info():
    """nvcc and CUDA_HOME as torch.utils.cpp_extension finds them (a source build of causal-conv1d needs both)."""
    env_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = shutil.which("nvcc")
    home = env_home
    if home is None and nvcc is not None:
        home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    if home is None and os.path.isdir("/usr/local/cuda"):
        home = "/usr/local/cuda"
    if nvcc is None and home is not None and os.path.isfile(os.path.join(home, "bin", "nvcc")):
        nvcc = os.path.join(home, "bin", "nvcc")
    version = None
    if nvcc is not None:
        try:
            res = subprocess.run([nvcc, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 timeout=15, check=False)
            lines = [l for l in res.stdout.decode("utf-8", "replace").splitlines() if l.strip()]
            version = lines[-1].strip() if lines else None
        except Exception as e:
            version = "failed: " + describe(e)
    return {"nvcc": nvcc, "nvcc_version": version, "cuda_home_env": env_home, "cuda_home": home,
            "cuda_home_exists": bool(home and os.path.isdir(home))}


def read_source(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def parse(path):
    text = read_source(path)
    if text is None:
        return None, None
    try:
        return text, ast.parse(text, filename=path)
    except SyntaxError as e:
        warnings.append("cannot parse %s: %s" % (path, describe(e)))
        return text, None


def call_name(node):
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def const_str(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def module_constants(tree, names):
    """Module-level NAME = <literal> assignments, evaluated safely."""
    found = {}
    if tree is None:
        return found
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for t in targets:
            if isinstance(t, ast.Name) and t.id in names:
                try:
                    found[t.id] = ast.literal_eval(value)
                except ValueError:
                    pass
    return found


def fallback_decorators(tree):
    """(kernel name, package, internal path, torch function) for each use_kernel_func_from_hub_with_fallback."""
    seams = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for dec in node.decorator_list:
            if not isinstance(dec, ast.Call) or call_name(dec) != "use_kernel_func_from_hub_with_fallback":
                continue
            args = [const_str(a) for a in dec.args]
            kw = {k.arg: const_str(k.value) for k in dec.keywords}
            name = args[0] if args else kw.get("func_name")
            package = args[1] if len(args) > 1 else kw.get("package")
            internal = args[2] if len(args) > 2 else kw.get("internal_path")
            if name and package:
                seams.append((name, package, internal, node.name))
    return seams


def gated_imports(tree):
    """The older scheme: `if is_X_available(): from M import a, b` at module level, and the fast-path tuple."""
    imports, required = [], None
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Call):
            helper = call_name(node.test)
            if helper and helper.startswith("is_") and helper.endswith("_available"):
                for stmt in node.body:
                    if isinstance(stmt, ast.ImportFrom) and stmt.module:
                        imports.append((helper, stmt.module, [a.name for a in stmt.names]))
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "is_fast_path_available" for t in node.targets):
            call = node.value
            if isinstance(call, ast.Call) and call_name(call) == "all" and call.args:
                seq = call.args[0]
                if isinstance(seq, (ast.Tuple, ast.List)):
                    required = [e.id for e in seq.elts if isinstance(e, ast.Name)]
    return imports, required


def resolve_internal_import(module, chained_path):
    """transformers.utils.import_utils.resolve_internal_import, same lookups in the same order."""
    if not module:
        return None
    final = getattr(module, chained_path.split(".")[-1], None)
    if final:
        return final
    final = module
    for part in chained_path.split("."):
        final = getattr(final, part, None)
        if not final:
            return None
    return final


def resolve_seam(name, package, internal, torch_fn, mapping):
    """What use_kernel_func_from_hub_with_fallback picks for one function (5.17 hub_kernels.py)."""
    internal = mapping.get(name, internal)
    full_func = name if internal is None else "%s.%s" % (internal, name)
    full_module = package if internal is None else "%s.%s" % (package, internal)
    entry = {"name": name, "package": package, "lookup": "%s.%s" % (package, full_func),
             "torch_function": torch_fn, "available": False, "resolved": None, "reason": None}
    if find_spec(package) is None:
        entry["reason"] = "package %s is not installed" % package
        return entry
    impl = None
    try:
        module = importlib.import_module(package)
        impl = resolve_internal_import(module, full_func)
        if impl is None and full_module != package:
            module = importlib.import_module(full_module)
            impl = getattr(module, name, None)
    except Exception as e:
        entry["reason"] = "importing %s failed: %s" % (package, describe(e))
        return entry
    if impl is None:
        entry["reason"] = "%s has no %s" % (package, full_func)
        return entry
    entry["available"] = True
    entry["resolved"] = "%s.%s" % (getattr(impl, "__module__", package), getattr(impl, "__name__", name))
    return entry


def helper_true(helper, module, cuda_available):
    """The older import gates, as transformers 5.x defines them (both need CUDA)."""
    top = module.split(".")[0]
    if find_spec(top) is None:
        return False, "package %s is not installed" % top
    if helper == "is_causal_conv1d_available":
        return (cuda_available, None if cuda_available else "%s needs CUDA and torch sees none" % helper)
    if helper == "is_flash_linear_attention_available":
        if not cuda_available:
            return False, "%s needs CUDA and torch sees none" % helper
        v, _ = package_version("fla")
        if version_tuple(v) < (0, 2, 2):
            return False, "%s needs fla >= 0.2.2, found %s" % (helper, v)
        return True, None
    warnings.append("unknown import gate %s: assumed true when %s is installed" % (helper, top))
    return True, None


def route_gated(imports, required, cuda_available):
    found, reasons = {}, {}
    for helper, module, names in imports:
        ok, why = helper_true(helper, module, cuda_available)
        for n in names:
            reasons.setdefault(n, why)
        if not ok:
            continue
        try:
            mod = importlib.import_module(module)
        except Exception as e:
            warnings.append("transformers would fail to import modeling_qwen3_5: from %s import ... raised %s"
                            % (module, describe(e)))
            for n in names:
                reasons[n] = "importing %s failed: %s" % (module, describe(e))
            continue
        for n in names:
            if getattr(mod, n, None) is not None:
                found[n] = "%s.%s" % (module, n)
            else:
                reasons[n] = "%s has no %s" % (module, n)
    need = required or list(KERNELS)
    kernels = []
    for n in need:
        pkg = next((m for _, m, names in imports if n in names), None)
        kernels.append({"name": n, "package": pkg.split(".")[0] if pkg else None,
                        "lookup": "%s.%s" % (pkg, n) if pkg else None, "torch_function": None,
                        "available": n in found, "resolved": found.get(n),
                        "reason": None if n in found else (reasons.get(n) or "not imported by this transformers")})
    return kernels


def hub_route(tf_dir, hub_text, import_utils_tree):
    spec = find_spec("kernels")
    version, _ = package_version("kernels") if spec is not None else (None, None)
    bounds = module_constants(import_utils_tree, ("KERNELS_MIN_VERSION", "KERNELS_MAX_VERSION"))
    lo, hi = bounds.get("KERNELS_MIN_VERSION"), bounds.get("KERNELS_MAX_VERSION")
    accepted = False
    if version is not None:
        v = version_tuple(version)
        accepted = (lo is None or v >= version_tuple(lo)) and (hi is None or v < version_tuple(hi))
    env = os.environ.get("USE_HUB_KERNELS", "YES").upper()
    mapped = [k for k in KERNELS if hub_text and re.search(r'"%s"\s*:\s*\{' % re.escape(k), hub_text)]
    return {"kernels_installed": spec is not None, "kernels_version": version, "min_version": lo,
            "max_version": hi, "accepted": accepted, "env_enabled": env in TRUE_VALUES,
            "mapped": mapped}


def transformers_route(packages, cuda_available):
    tf = packages["transformers"]
    out = {"scheme": None, "modeling_file": None, "kernels": [], "fast_path": None, "hub": None}
    if not tf["installed"]:
        out["scheme"] = "no-transformers"
        return out
    base = tf["location"]
    if base is None or not os.path.isdir(base):
        out["scheme"] = "unknown"
        warnings.append("transformers is installed but its package directory was not found")
        return out
    modeling = os.path.join(base, "models", "qwen3_5", "modeling_qwen3_5.py")
    out["modeling_file"] = modeling
    _, tree = parse(modeling)
    if tree is None:
        out["scheme"] = "no-qwen3_5"
        return out
    hub_text, hub_tree = parse(os.path.join(base, "integrations", "hub_kernels.py"))
    _, utils_tree = parse(os.path.join(base, "utils", "import_utils.py"))
    seams = fallback_decorators(tree)
    if seams:
        out["scheme"] = "per-function-fallback"
        consts = module_constants(hub_tree, ("_KERNELS_INTERNAL_PATH_MAPPINGS",))
        mapping = consts.get("_KERNELS_INTERNAL_PATH_MAPPINGS")
        if not isinstance(mapping, dict):
            warnings.append("could not read _KERNELS_INTERNAL_PATH_MAPPINGS from hub_kernels.py; "
                            "used transformers 5.17's")
            mapping = DEFAULT_INTERNAL_PATHS
        out["kernels"] = [resolve_seam(n, p, i, f, mapping) for n, p, i, f in seams]
        out["hub"] = hub_route(base, hub_text, utils_tree)
        if any(k["available"] for k in out["kernels"] if k["package"] == "fla") and not cuda_available:
            warnings.append("transformers will call fla's Triton kernels, but torch sees no CUDA device")
    else:
        imports, required = gated_imports(tree)
        if not imports:
            out["scheme"] = "unknown"
            warnings.append("modeling_qwen3_5.py has neither kernel seam this probe knows")
            return out
        out["scheme"] = "fast-path-gate"
        out["kernels"] = route_gated(imports, required, cuda_available)
    out["fast_path"] = all(k["available"] for k in out["kernels"]) if out["kernels"] else None
    return out


def model_layers(path):
    """Layer counts from a config.json (flat or with text_config; layer_types or full_attention_interval)."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path, "r", encoding="utf-8") as f:
        cfg = json.load(f)
    text = cfg.get("text_config") or cfg
    n = int(text["num_hidden_layers"])
    types = text.get("layer_types")
    if types is None:
        every = int(text.get("full_attention_interval", 4))
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
    return {"config": path, "layers": len(types), "linear": types.count("linear_attention"),
            "full": types.count("full_attention")}


def python_info():
    import site
    prefix, base = sys.prefix, getattr(sys, "base_prefix", sys.prefix)
    try:
        user_site = site.getusersitepackages()
    except Exception:
        user_site = None
    return {"executable": sys.executable, "version": sys.version.split()[0], "prefix": prefix,
            "virtualenv": prefix != base or bool(os.environ.get("CONDA_PREFIX")),
            "user_site": user_site, "user_site_enabled": bool(site.ENABLE_USER_SITE),
            "pythonpath": os.environ.get("PYTHONPATH")}


def probe(args):
    result = {"schema": SCHEMA, "error": None, "python": python_info()}
    packages = packages_info()
    result["packages"] = packages
    cuda = cuda_info(packages["torch"]["installed"])
    result["cuda"] = cuda
    result["transformers"] = transformers_route(packages, cuda["available"])
    if args.model_config:
        try:
            result["model"] = model_layers(args.model_config)
        except Exception as e:
            result["model"] = {"config": args.model_config, "error": describe(e)}
    result["warnings"] = warnings
    return result


def main():
    ap = argparse.ArgumentParser(description="qwenref doctor's probe (prints JSON)")
    ap.add_argument("--model-config", help="a checkpoint directory or its config.json: count its layers")
    ap.add_argument("--out", help="write the JSON here instead of stdout")
    args = ap.parse_args()
    # Anything the checked packages print goes to stderr, so stdout holds only the JSON.
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        result = probe(args)
    except Exception as e:
        result = {"schema": SCHEMA, "error": "probe failed: " + describe(e)}
    data = (json.dumps(result, indent=2, sort_keys=True) + "\n").encode("utf-8")
    if args.out:
        with open(args.out, "wb") as f:
            f.write(data)
    else:
        while data:
            data = data[os.write(real_stdout, data):]
    return 0


if __name__ == "__main__":
    sys.exit(main())
