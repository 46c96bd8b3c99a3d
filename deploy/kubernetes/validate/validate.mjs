// Validates Kubernetes manifests offline against the Kubernetes API schema, with the validators
// that the npm package kubernetes-models generates from Kubernetes' OpenAPI definitions (no
// cluster, no network). Strict: a field the schema does not know (a typo, a wrong indent) is
// an error too. The schema leaves unknown fields open, so each field is probed: replaced by a
// value no schema type accepts, a known field makes the validator fail at that path and an
// unknown one does not.
//   node validate.mjs [--byteps] FILE...
// --byteps also checks one rendered byteps job (deploy/kubernetes/render.sh) for consistency
// and prints its ranks and counts: the server StatefulSet's replicas equal DMLC_NUM_SERVER and
// its pods take ranks 0..N-1 from their pod index, the worker Job's completions and parallelism
// equal DMLC_NUM_WORKER and its pods take DMLC_WORKER_ID from their completion index, the
// scheduler's Service is DMLC_PS_ROOT_URI on DMLC_PS_ROOT_PORT, and every selector, envFrom
// and probe port points at something that exists.
// Exit status: 0 when every document is valid (and consistent), 1 otherwise, 2 on usage errors.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { parseAllDocuments } from "yaml";

const require = createRequire(import.meta.url);
const modelsVersion = require("kubernetes-models/package.json").version;

const args = process.argv.slice(2);
const byteps = args[0] === "--byteps";
const files = byteps ? args.slice(1) : args;
if (files.length === 0) {
  console.error("usage: node validate.mjs [--byteps] FILE...");
  process.exit(2);
}

const problems = [];
const docs = [];

async function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" || !/^[A-Za-z0-9]+$/.test(kind))
    return null;
  try {
    // "apps/v1" -> kubernetes-models/apps/v1/Deployment, "v1" -> kubernetes-models/v1/Service
    const mod = await import(`kubernetes-models/${apiVersion}/${kind}`);
    return mod[kind] ?? null;
  } catch {
    return null;
  }
}

function errorsOf(Model, data) {
  try {
    new Model(data).validate();
    return null;
  } catch (e) {
    return e;
  }
}

// Every path (array of keys) of an object tree, parents before children.
function* pathsOf(value, prefix = []) {
  if (value === null || typeof value !== "object") return;
  for (const [k, v] of Object.entries(value)) {
    const key = Array.isArray(value) ? Number(k) : k;
    yield [...prefix, key];
    yield* pathsOf(v, [...prefix, key]);
  }
}

function setAt(obj, path, v) {
  let o = obj;
  for (let i = 0; i < path.length - 1; i++) o = o[path[i]];
  o[path[path.length - 1]] = v;
}

const pointer = (path) => "/" + path.map((k) => String(k).replace(/~/g, "~0").replace(/\//g, "~1")).join("/");

// The fields of data that the schema does not know: each object key is replaced by a function
// (no JSON type); a known field fails validation at its own path.
function unknownFields(Model, data) {
  const unknown = [];
  const skip = [];
  for (const path of pathsOf(data)) {
    if (typeof path[path.length - 1] === "number") continue; // array items: their array is known
    if (skip.some((p) => p.length <= path.length && p.every((k, i) => k === path[i]))) continue;
    if (path.length === 1 && (path[0] === "apiVersion" || path[0] === "kind")) continue;
    const probe = structuredClone(data);
    setAt(probe, path, () => {});
    const err = errorsOf(Model, probe);
    const at = pointer(path);
    const hit = err && (err.errors ?? []).some((e) => e.instancePath === at || e.instancePath.startsWith(at + "/"));
    const message = err ? String(err.message) : "";
    if (!hit && !message.includes(at.slice(1))) {
      unknown.push(path.join("."));
      skip.push(path); // its children are unknown with it
    }
  }
  return unknown;
}

for (const file of files) {
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    problems.push(`${file}: cannot read: ${e.message}`);
    continue;
  }
  const parsed = parseAllDocuments(text);
  for (const [i, doc] of parsed.entries()) {
    const where = `${file} document ${i + 1}`;
    if (doc.errors.length > 0) {
      problems.push(`${where}: YAML error: ${doc.errors[0].message}`);
      continue;
    }
    const data = doc.toJS();
    if (data === null || data === undefined) continue; // an empty document
    const name = `${data.kind}/${data.metadata?.name ?? "(no name)"}`;
    const Model = await modelFor(data.apiVersion, data.kind);
    if (!Model) {
      problems.push(`${where} ${name}: no schema for apiVersion '${data.apiVersion}' kind '${data.kind}'`);
      continue;
    }
    const err = errorsOf(Model, data);
    if (err) {
      problems.push(`${where} ${name}: ${err.message}`);
      continue;
    }
    const unknown = unknownFields(Model, data);
    if (unknown.length > 0) {
      problems.push(`${where} ${name}: fields the schema does not have: ${unknown.join(", ")}`);
      continue;
    }
    docs.push({ where, name, data });
    console.log(`valid: ${name} (${data.apiVersion}) in ${file}`);
  }
}

if (byteps) checkJob();

if (problems.length > 0) {
  for (const p of problems) console.log(`INVALID: ${p}`);
}
console.log(
  `kubernetes-models ${modelsVersion}: ${docs.length} document(s) valid, ${problems.length} problem(s)` +
    " (strict: unknown fields are errors)"
);
process.exit(problems.length > 0 ? 1 : 0);

// ---- the byteps job's consistency -----------------------------------------------------------
function checkJob() {
  const of = (kind) => docs.filter((d) => d.data.kind === kind).map((d) => d.data);
  const byName = (kind, name) => of(kind).find((d) => d.metadata.name === name);
  const fail = (msg) => problems.push(`byteps job: ${msg}`);
  const component = (d) => d.spec?.template?.metadata?.labels?.["app.kubernetes.io/component"];
  const container = (d) => d.spec.template.spec.containers[0];
  const envOf = (c) => Object.fromEntries((c.env ?? []).map((e) => [e.name, e.valueFrom ? { from: e.valueFrom } : e.value]));
  const fieldRef = (v) => v?.from?.fieldRef?.fieldPath;

  const config = of("ConfigMap")[0];
  if (!config) return fail("no ConfigMap");
  const cfg = config.data ?? {};
  const numWorkers = Number(cfg.DMLC_NUM_WORKER);
  const numServers = Number(cfg.DMLC_NUM_SERVER);
  const rootPort = Number(cfg.DMLC_PS_ROOT_PORT);

  // Every pod template: selector matches its labels; envFrom names exist; probe ports exist.
  for (const kind of ["Deployment", "StatefulSet", "Job"]) {
    for (const d of of(kind)) {
      const labels = d.spec.template.metadata?.labels ?? {};
      for (const [k, v] of Object.entries(d.spec.selector?.matchLabels ?? {}))
        if (labels[k] !== v) fail(`${kind}/${d.metadata.name}: selector ${k}=${v} does not match its pods' labels`);
      for (const c of d.spec.template.spec.containers) {
        for (const ef of c.envFrom ?? []) {
          if (ef.configMapRef && !byName("ConfigMap", ef.configMapRef.name))
            fail(`${kind}/${d.metadata.name}: envFrom names ConfigMap ${ef.configMapRef.name}, which is not there`);
          if (ef.secretRef && !byName("Secret", ef.secretRef.name))
            fail(`${kind}/${d.metadata.name}: envFrom names Secret ${ef.secretRef.name}, which is not there`);
        }
        const ports = new Set((c.ports ?? []).flatMap((p) => [p.name, p.containerPort]));
        const probePort = c.livenessProbe?.tcpSocket?.port;
        if (probePort !== undefined && !ports.has(probePort))
          fail(`${kind}/${d.metadata.name}: the liveness probe's port ${probePort} is not a port of the container`);
      }
      if (kind === "StatefulSet" && !byName("Service", d.spec.serviceName))
        fail(`StatefulSet/${d.metadata.name}: serviceName ${d.spec.serviceName} is not a Service here`);
    }
  }
  const secret = of("Secret")[0];
  if (!secret || !(secret.stringData?.BYTEPS_JOB_TOKEN || secret.data?.BYTEPS_JOB_TOKEN))
    fail("no Secret with BYTEPS_JOB_TOKEN");

  // Scheduler.
  const scheduler = of("Deployment").find((d) => component(d) === "scheduler");
  if (!scheduler) return fail("no scheduler Deployment");
  const schedEnv = envOf(container(scheduler));
  if (schedEnv.DMLC_ROLE !== "scheduler") fail("the scheduler's DMLC_ROLE is not scheduler");
  if (scheduler.spec.replicas !== 1) fail(`the scheduler has ${scheduler.spec.replicas} replicas, not 1`);
  const service = byName("Service", cfg.DMLC_PS_ROOT_URI);
  if (!service) fail(`DMLC_PS_ROOT_URI '${cfg.DMLC_PS_ROOT_URI}' is not a Service of this job`);
  else {
    const sel = service.spec.selector ?? {};
    const podLabels = scheduler.spec.template.metadata.labels;
    if (!Object.entries(sel).every(([k, v]) => podLabels[k] === v))
      fail(`Service/${service.metadata.name} does not select the scheduler's pod`);
    const p = (service.spec.ports ?? []).find((p) => p.port === rootPort);
    if (!p) fail(`Service/${service.metadata.name} has no port ${rootPort} (DMLC_PS_ROOT_PORT)`);
    else if (!(container(scheduler).ports ?? []).some((cp) => cp.containerPort === (p.targetPort ?? p.port)))
      fail(`the scheduler container does not expose the Service's target port ${p.targetPort}`);
  }

  // Servers: ranks 0..replicas-1 from the pod index.
  const servers = of("StatefulSet").find((d) => component(d) === "server");
  if (!servers) return fail("no server StatefulSet");
  const srvEnv = envOf(container(servers));
  if (srvEnv.DMLC_ROLE !== "server") fail("the servers' DMLC_ROLE is not server");
  if (fieldRef(srvEnv.BYTEPS_SERVER_ID) !== "metadata.labels['apps.kubernetes.io/pod-index']")
    fail("the servers' BYTEPS_SERVER_ID does not come from the pod index");
  if (fieldRef(srvEnv.DMLC_NODE_HOST) !== "status.podIP") fail("the servers' DMLC_NODE_HOST is not the pod IP");
  if (servers.spec.replicas !== numServers)
    fail(`the server StatefulSet has ${servers.spec.replicas} replicas, DMLC_NUM_SERVER is ${numServers}`);
  const standby = of("StatefulSet").find((d) => component(d) === "standby");
  if (standby) {
    const sbEnv = envOf(container(standby));
    if (sbEnv.BYTEPS_SERVER_STANDBY !== "1" || sbEnv.BYTEPS_SERVER_ID !== undefined)
      fail("standby servers need BYTEPS_SERVER_STANDBY=1 and no BYTEPS_SERVER_ID");
    if (!(Number(cfg.BYTEPS_FAILOVER_TIMEOUT_MS) > 0)) fail("standby servers need BYTEPS_FAILOVER_TIMEOUT_MS > 0");
  }

  // Workers: DMLC_WORKER_ID 0..completions-1 from the completion index.
  const workers = of("Job").find((d) => component(d) === "worker");
  if (!workers) return fail("no worker Job");
  const wEnv = envOf(container(workers));
  if (wEnv.DMLC_ROLE !== "worker") fail("the workers' DMLC_ROLE is not worker");
  if (workers.spec.completionMode !== "Indexed") fail("the worker Job is not Indexed");
  if (fieldRef(wEnv.DMLC_WORKER_ID) !== "metadata.annotations['batch.kubernetes.io/job-completion-index']")
    fail("the workers' DMLC_WORKER_ID does not come from the completion index");
  if (workers.spec.completions !== numWorkers || workers.spec.parallelism !== numWorkers)
    fail(`the worker Job runs ${workers.spec.completions} completions, ${workers.spec.parallelism} at once; DMLC_NUM_WORKER is ${numWorkers}`);

  const range = (n) => (n === 1 ? "0" : `0..${n - 1}`);
  console.log(`scheduler: Deployment/${scheduler.metadata.name} (1 replica) behind Service/${cfg.DMLC_PS_ROOT_URI}:${rootPort}`);
  console.log(
    `servers: StatefulSet/${servers.metadata.name}, ${servers.spec.replicas} replicas = DMLC_NUM_SERVER ${numServers}, ranks ${range(servers.spec.replicas)} from the pod index`
  );
  if (standby) console.log(`standby servers: StatefulSet/${standby.metadata.name}, ${standby.spec.replicas} replica(s)`);
  console.log(
    `workers: Job/${workers.metadata.name}, ${workers.spec.completions} indexed completions, ${workers.spec.parallelism} at once = DMLC_NUM_WORKER ${numWorkers}, DMLC_WORKER_ID ${range(workers.spec.completions)} from the completion index`
  );
  console.log(`worker command: ${JSON.stringify(container(workers).command)}`);
}
