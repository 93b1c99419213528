// Convert @huggingface/jinja's test cases (MIT, packages/jinja/test in
// github.com/huggingface/huggingface.js) into data: each case's template and
// context, and nothing of the tests' code. Run with Node from the repository
// root, naming the two test files of the source checkout:
//
//     node testdata/gen/hf_jinja_cases.mjs SRC/packages/jinja/test/templates.test.js \
//         SRC/packages/jinja/test/e2e.test.js COMMIT > testdata/chat/hf_jinja_cases.json
//
// The file's constants (object literals) are evaluated with the imports and
// the test blocks cut away. Cases whose context holds a JavaScript function or
// undefined cannot be data; they are listed under "omitted" with the reason.
// The expected renders are not taken from the suite: testdata/gen/gen_chat_hf_jinja.py
// renders every case with Python's jinja2.
import { readFileSync } from "node:fs";

function constants(path, names) {
	let src = readFileSync(path, "utf8");
	src = src.replace(/^import .*$/gm, "");
	const cut = src.search(/^(describe\(|function )/m);
	if (cut < 0) throw new Error(`${path}: no test blocks found`);
	src = src.slice(0, cut);
	return new Function(`${src}\nreturn { ${names.join(", ")} };`)();
}

function why(v, seen = new Set()) {
	if (v === undefined) return "holds undefined";
	if (typeof v === "function") return "holds a JavaScript function";
	if (typeof v === "bigint") return "holds a BigInt";
	if (typeof v === "number" && !Number.isFinite(v)) return "holds a non-finite number";
	if (v && typeof v === "object") {
		if (seen.has(v)) return "is cyclic";
		seen.add(v);
		if (!Array.isArray(v) && Object.getPrototypeOf(v) !== Object.prototype) return "holds a non-plain object";
		for (const x of Object.values(v)) {
			const r = why(x, seen);
			if (r) return r;
		}
		seen.delete(v);
	}
	return "";
}

const [templatesFile, e2eFile, commit] = process.argv.slice(2);
if (!e2eFile) {
	console.error("usage: node hf_jinja_cases.mjs templates.test.js e2e.test.js [commit]");
	process.exit(2);
}
const t = constants(templatesFile, ["TEST_STRINGS", "TEST_CONTEXT"]);
const e = constants(e2eFile, ["TEST_DEFAULT_TEMPLATES", "TEST_CUSTOM_TEMPLATES"]);
const cases = [];
const omitted = [];
function add(name, template, context) {
	const reason = context === undefined ? "has no context" : why(context);
	if (reason) omitted.push({ name, reason: `the context ${reason}` });
	else cases.push({ name, template, context });
}
for (const [name, text] of Object.entries(t.TEST_STRINGS)) add(`templates/${name}`, text, t.TEST_CONTEXT[name]);
for (const [group, set] of [["default", e.TEST_DEFAULT_TEMPLATES], ["custom", e.TEST_CUSTOM_TEMPLATES]]) {
	for (const [name, c] of Object.entries(set)) add(`e2e-${group}/${name}`, c.chat_template, c.data);
}
const out = {
	source: "@huggingface/jinja test cases, github.com/huggingface/huggingface.js packages/jinja/test (MIT, see hf_jinja.LICENSE)",
	commit: commit || "",
	cases,
	omitted,
};
process.stdout.write(JSON.stringify(out, null, 1) + "\n");
