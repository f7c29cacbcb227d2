// The Kubeflow training operator's PyTorchJob (kubeflow.org/v1) as a model validate.mjs can use:
// its CRD schema (manifests/base/crds/kubeflow.org_pytorchjobs.yaml of kubeflow/training-operator)
// written out as the structure below, the operator's own admission rules added (replica types
// Master and Worker, one Master, a container named "pytorch"), and the pod templates and metadata
// checked by kubernetes-models' PodTemplateSpec and ObjectMeta, as for every other kind.
// No npm package carries Kubeflow's models, hence this file. The walker reads exactly the
// properties SCHEMA defines (and enumerates maps), so validate.mjs's unknown-field check holds
// for it as for the generated validators (selfcheck.mjs covers those; fixtures/pytorchjob-bad
// proves this one).
import { ObjectMeta } from "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta";
import { PodTemplateSpec } from "kubernetes-models/v1/PodTemplateSpec";

const int = { type: "integer" };
const str = { type: "string" };
const bool = { type: "boolean" };
const quantity = { anyOf: ["integer", "string"] };

const REPLICA = {
  type: "object",
  properties: {
    replicas: int,
    restartPolicy: { type: "string", enum: ["Always", "OnFailure", "Never", "ExitCode"] },
    template: { model: PodTemplateSpec },
  },
};

const SCHEMA = {
  type: "object",
  required: ["spec"],
  properties: {
    apiVersion: str,
    kind: str,
    metadata: { model: ObjectMeta },
    spec: {
      type: "object",
      required: ["pytorchReplicaSpecs"],
      properties: {
        elasticPolicy: {
          type: "object",
          properties: {
            maxReplicas: int,
            maxRestarts: int,
            metrics: { type: "array" }, // autoscaling/v2 MetricSpecs: not checked further
            minReplicas: int,
            nProcPerNode: int,
            rdzvBackend: str,
            rdzvConf: { type: "array", items: { type: "object", properties: { key: str, value: str } } },
            rdzvHost: str,
            rdzvId: str,
            rdzvPort: int,
            standalone: bool,
          },
        },
        nprocPerNode: str,
        pytorchReplicaSpecs: { type: "object", keys: ["Master", "Worker"], values: REPLICA },
        runPolicy: {
          type: "object",
          properties: {
            activeDeadlineSeconds: int,
            backoffLimit: int,
            cleanPodPolicy: { type: "string", enum: ["All", "Running", "None"] },
            managedBy: str,
            schedulingPolicy: {
              type: "object",
              properties: {
                minAvailable: int,
                minResources: { type: "object", values: quantity },
                priorityClass: str,
                queue: str,
                scheduleTimeoutSeconds: int,
              },
            },
            suspend: bool,
            ttlSecondsAfterFinished: int,
          },
        },
      },
    },
  },
};

function typeOk(type, v) {
  switch (type) {
    case "integer":
      return Number.isInteger(v);
    case "string":
      return typeof v === "string";
    case "boolean":
      return typeof v === "boolean";
    case "array":
      return Array.isArray(v);
    default:
      return v !== null && typeof v === "object" && !Array.isArray(v);
  }
}

// Appends ajv-shaped errors ({instancePath, message, params}) of value against schema at path.
function walk(schema, value, path, errors) {
  if (schema.model) {
    try {
      schema.model.prototype.validate.call(value);
    } catch (e) {
      if (!Array.isArray(e.errors)) {
        throw e;
      }
      for (const err of e.errors) {
        errors.push({ ...err, instancePath: path + err.instancePath });
      }
    }
    return;
  }
  if (schema.anyOf) {
    if (!schema.anyOf.some((t) => typeOk(t, value))) {
      errors.push({ instancePath: path, message: `must be ${schema.anyOf.join(" or ")}` });
    }
    return;
  }
  if (!typeOk(schema.type, value)) {
    errors.push({ instancePath: path, message: `must be ${schema.type}` });
    return;
  }
  if (schema.enum && !schema.enum.includes(value)) {
    errors.push({
      instancePath: path,
      message: "must be equal to one of the allowed values",
      params: { allowedValues: schema.enum },
    });
  }
  if (schema.type === "array" && schema.items) {
    value.forEach((v, i) => walk(schema.items, v, `${path}/${i}`, errors));
  }
  if (schema.type !== "object") {
    return;
  }
  for (const r of schema.required || []) {
    if (!(r in value)) {
      errors.push({ instancePath: path, message: `must have required property '${r}'` });
    }
  }
  for (const [k, s] of Object.entries(schema.properties || {})) {
    if (value[k] !== undefined) {
      walk(s, value[k], `${path}/${k}`, errors);
    }
  }
  if (schema.values) { // a map: every key allowed (or those of schema.keys), every value checked
    for (const k of Object.keys(value)) {
      if (schema.keys && !schema.keys.includes(k)) {
        errors.push({
          instancePath: `${path}/${k}`,
          message: `is not a replica type of the operator (${schema.keys.join(", ")})`,
        });
        continue;
      }
      walk(schema.values, value[k], `${path}/${k}`, errors);
    }
  }
}

// The training operator's admission checks beyond the schema (its PyTorchJob validation).
function operatorRules(job, errors) {
  const specs = job.spec && job.spec.pytorchReplicaSpecs;
  if (!specs || typeof specs !== "object") {
    return;
  }
  for (const type of ["Master", "Worker"]) {
    const rs = specs[type];
    if (!rs || typeof rs !== "object") {
      continue;
    }
    const path = `/spec/pytorchReplicaSpecs/${type}`;
    if (type === "Master" && rs.replicas !== undefined && rs.replicas !== 1) {
      errors.push({ instancePath: `${path}/replicas`, message: "must be 1 (one Master)" });
    }
    const containers = rs.template && rs.template.spec && rs.template.spec.containers;
    if (Array.isArray(containers) && !containers.some((c) => c && c.name === "pytorch")) {
      errors.push({
        instancePath: `${path}/template/spec/containers`,
        message: "must have a container named \"pytorch\" (the operator sets its environment)",
      });
    }
  }
}

export class PyTorchJob {
  static apiVersion = "kubeflow.org/v1";

  static kind = "PyTorchJob";

  constructor(data) {
    Object.assign(this, data);
  }

  validate() {
    const errors = [];
    walk(SCHEMA, this, "", errors);
    operatorRules(this, errors);
    if (errors.length > 0) {
      const e = new Error("PyTorchJob is invalid");
      e.errors = errors;
      throw e;
    }
  }
}
