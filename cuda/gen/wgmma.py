# Prints the wgmma wrappers of cuda/csrc/wgmma.cuh (regular operand lists).
def lit(n, per=16, indent="\t             "):
    lines = []
    for st in range(0, n, per):
        lines.append('"' + ", ".join(f"%{i}" for i in range(st, min(n, st + per))) + (", " if st + per < n else "") + '"')
    return ("\n" + indent).join(lines)

def f8(n):
    return ", ".join(f"WG_F8(d, {i})" for i in range(0, n, 8))

def wrap(name, n, doc, rs, tnspb):
    nacc = n // 2
    if rs:
        ins = f'"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate)'
        aop = f"{{%{nacc}, %{nacc+1}, %{nacc+2}, %{nacc+3}}}, %{nacc+4}"
        pidx = nacc + 5
        tail = f"p, 1, 1, {tnspb}"
        sig = f"float d[{nacc}], const unsigned a[4], uint64_t db, int accumulate"
    else:
        ins = f'"l"(da), "l"(db), "r"(accumulate)'
        aop = f"%{nacc}, %{nacc+1}"
        pidx = nacc + 2
        tail = f"p, 1, 1, 0, {tnspb}"
        sig = f"float d[{nacc}], uint64_t da, uint64_t db, int accumulate"
    fl = f8(nacc)
    # split operand macro list over lines of 7
    parts = fl.split(", WG_F8")
    parts = [parts[0]] + ["WG_F8" + p for p in parts[1:]]
    lines = []
    for i in range(0, len(parts), 7):
        lines.append(", ".join(parts[i:i+7]))
    outs = (",\n\t               ").join(lines)
    return f'''{doc}
__device__ __forceinline__ void {name}({sig}) {{
	asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{pidx}, 0;\\n"
	             "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{"
	             {lit(nacc)}
	             "}}, {aop}, {tail};\\n}}\\n"
	             : {outs}
	             : {ins});
}}
'''

print(wrap("wg_m64n64k16_ss", 64, "// d[64x64] = A[64x16] B[16x64] + (accumulate ? d : 0); A and B K-major in\n// shared memory.", False, 0))
print(wrap("wg_m64n64k16_rs", 64, "// d[64x64] = A[64x16] B[16x64] + (accumulate ? d : 0); A in registers (the\n// mma.sync A fragment of each warp's 16 rows), B K-major in shared memory.", True, 0))
print(wrap("wg_m64n128k16_rs_t", 128, "// d[64x128] = A[64x16] B[16x128] + (accumulate ? d : 0); A in registers, B\n// MN-major (n contiguous) in shared memory.", True, 1))
print(wrap("wg_m64n256k16_rs_t", 256, "// d[64x256] = A[64x16] B[16x256] + (accumulate ? d : 0); A in registers, B\n// MN-major (n contiguous) in shared memory.", True, 1))
