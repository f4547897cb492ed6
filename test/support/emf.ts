// A validator of CloudWatch Embedded Metric Format documents, written from the specification's
// rules (structure, units, limits), so tests check what CloudWatch would accept, not a snapshot.
export const EMF_UNITS = new Set([
  "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes", "Terabytes",
  "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count", "Bytes/Second",
  "Kilobytes/Second", "Megabytes/Second", "Gigabytes/Second", "Terabytes/Second", "Bits/Second",
  "Kilobits/Second", "Megabits/Second", "Gigabits/Second", "Terabits/Second", "Count/Second", "None",
]);

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isNumber = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const nonEmpty = (v: unknown, max: number): v is string => typeof v === "string" && v.trim().length > 0 && v.length <= max;

/** Every rule the document breaks; [] when CloudWatch would extract its metrics. */
export function emfProblems(doc: unknown, now = Date.now()): string[] {
  const p: string[] = [];
  // The log event must be one JSON object: round-trip it to be sure nothing is lost.
  let root: unknown;
  try {
    root = JSON.parse(JSON.stringify(doc));
  } catch (e) {
    return [`not JSON: ${String(e)}`];
  }
  if (!isObject(root)) return ["root is not an object"];
  const aws = root._aws;
  if (!isObject(aws)) return ["_aws metadata object missing"];
  const ts = aws.Timestamp;
  if (!isNumber(ts) || !Number.isInteger(ts)) p.push("_aws.Timestamp must be an integer number");
  // Milliseconds since the epoch, inside what CloudWatch accepts (2 weeks back, 2 hours ahead).
  else if (ts < now - 14 * 86_400_000 || ts > now + 2 * 3_600_000) p.push(`_aws.Timestamp ${ts} is not epoch milliseconds near now`);
  const directives = aws.CloudWatchMetrics;
  if (!Array.isArray(directives)) return [...p, "_aws.CloudWatchMetrics must be an array"];
  directives.forEach((d: unknown, i) => {
    const at = `CloudWatchMetrics[${i}]`;
    if (!isObject(d)) return void p.push(`${at} is not an object`);
    if (!nonEmpty(d.Namespace, 255)) p.push(`${at}.Namespace must be a non-empty string of at most 255 characters`);
    if (!Array.isArray(d.Dimensions)) p.push(`${at}.Dimensions must be an array`);
    else {
      d.Dimensions.forEach((set: unknown, j) => {
        if (!Array.isArray(set)) return void p.push(`${at}.Dimensions[${j}] must be an array`);
        if (set.length > 30) p.push(`${at}.Dimensions[${j}] has ${set.length} dimensions (at most 30)`);
        for (const name of set) {
          if (!nonEmpty(name, 255)) p.push(`${at}.Dimensions[${j}]: dimension name ${JSON.stringify(name)} must be 1-255 characters`);
          else if (!nonEmpty(root[name], 1024)) p.push(`dimension ${name} must reference a root member holding a non-empty string of at most 1024 characters`);
        }
      });
    }
    if (!Array.isArray(d.Metrics)) return void p.push(`${at}.Metrics must be an array`);
    if (d.Metrics.length > 100) p.push(`${at}.Metrics has ${d.Metrics.length} metrics (at most 100)`);
    const names = new Set<string>();
    d.Metrics.forEach((m: unknown, k) => {
      const mat = `${at}.Metrics[${k}]`;
      if (!isObject(m)) return void p.push(`${mat} is not an object`);
      if (!nonEmpty(m.Name, 1024)) return void p.push(`${mat}.Name must be a non-empty string of at most 1024 characters`);
      if (names.has(m.Name)) p.push(`${mat}: metric ${m.Name} defined twice`);
      names.add(m.Name);
      if (m.Unit !== undefined && (typeof m.Unit !== "string" || !EMF_UNITS.has(m.Unit))) p.push(`${mat}: unit ${JSON.stringify(m.Unit)} is not a CloudWatch unit`);
      if (m.StorageResolution !== undefined && m.StorageResolution !== 1 && m.StorageResolution !== 60) p.push(`${mat}.StorageResolution must be 1 or 60`);
      const v = root[m.Name];
      if (isNumber(v)) return;
      if (Array.isArray(v)) {
        if (v.length === 0 || v.length > 100 || !v.every(isNumber)) p.push(`metric ${m.Name}: an array value must hold 1-100 numbers`);
        return;
      }
      if (isObject(v) && Array.isArray(v.Values)) {
        const { Values, Counts } = v as { Values: unknown[]; Counts?: unknown };
        if (Values.length === 0 || Values.length > 100 || !Values.every(isNumber)) p.push(`metric ${m.Name}: Values must hold 1-100 numbers`);
        if (Counts !== undefined && (!Array.isArray(Counts) || Counts.length !== Values.length || !Counts.every((c) => isNumber(c) && c >= 0))) {
          p.push(`metric ${m.Name}: Counts must be non-negative numbers, one per value`);
        }
        return;
      }
      p.push(`metric ${m.Name}: root member must be a number, an array of numbers or {Values, Counts}, got ${JSON.stringify(v)}`);
    });
  });
  return p;
}

/** Throws with every problem of the document. */
export function assertEmf(doc: unknown): void {
  const p = emfProblems(doc);
  if (p.length > 0) throw new Error(`invalid EMF document:\n  ${p.join("\n  ")}\n${JSON.stringify(doc)}`);
}

/** The unit a document declares for a metric. */
export function unitOf(doc: { _aws: { CloudWatchMetrics: { Metrics: { Name: string; Unit?: string }[] }[] } }, name: string): string | undefined {
  return doc._aws.CloudWatchMetrics.flatMap((d) => d.Metrics).find((m) => m.Name === name)?.Unit;
}
