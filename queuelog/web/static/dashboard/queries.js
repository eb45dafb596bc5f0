// Every GraphQL document the dashboard sends (bench/_dashboard.py times its reads word for
// word).

export const TIMELINE_EVENTS = 50; // Job.events(last:): the newest this many transitions of the open job
export const ATTEMPTS = 50; // Job.attempts(last:): the newest this many claims of the open job
const SPARK_MINUTES = 30; // full minutes drawn; queueStats.throughput also gives the current one
export const COUNTS = ["pending", "running", "completed", "failed", "cancelled"];
const ROW_FIELDS = "id type status priority attempt createdAt updatedAt scheduleName waitingFor";
// The job's own values, then its relations (read from other tables): events and dependsOn.
const DETAIL_FIELDS =
  "id type payload priority status retryCount maxRetries attempt idempotencyKey workerId " +
  "claimedAt leaseExpiresAt runAt finishedAt result createdAt updatedAt concurrencyKey timeoutSeconds " +
  "waitingFor scheduleName cancelRequested expiresAt snoozeCount progress progressMessage progressAt " +
  `events(last: ${TIMELINE_EVENTS}) { kind status at } dependsOn`;
const ATTEMPT_FIELDS = "attempt workerId claimedAt finishedAt outcome";
const COUNT_FIELDS = COUNTS.join(" ");

export const SIGN_IN_QUERY = "query Me { me { name roles maxPriority } }";
export const KEY_CHECK_QUERY = "query Me { me { name } }";
export const STATS_QUERY = `query Stats { queueStats { counts { ${COUNT_FIELDS} } oldestPendingSeconds
  byType { type counts { ${COUNT_FIELDS} } } throughput(minutes: ${SPARK_MINUTES + 1}) { at completed failed } } }`;
export const JOBS_QUERY = `query Jobs($status: JobStatus, $type: String, $scheduleName: String, $first: Int!, $after: String) {
  jobs(status: $status, type: $type, scheduleName: $scheduleName, first: $first, after: $after) {
    totalCount pageInfo { hasNextPage endCursor } nodes { ${ROW_FIELDS} } } }`;
export const EVENTS_SUBSCRIPTION = `subscription Events { jobEvents { kind at job { ${ROW_FIELDS} } } }`;

// One job: job(id), jobUpdated(id), updateJob(id, input) or another mutation on it (cancelJob,
// retryJob, runJobNow). The job's and its attempts' `error` are asked for only with an ADMIN key,
// the one role that may read them.
export function detailQuery(operation, admin) {
  const error = admin ? " error" : "";
  const fields = `${DETAIL_FIELDS} attempts(last: ${ATTEMPTS}) { ${ATTEMPT_FIELDS}${error} }${error}`;
  if (operation === "job") return `query Job($id: ID!) { job(id: $id) { ${fields} } }`;
  if (operation === "jobUpdated") return `subscription Job($id: ID!) { jobUpdated(id: $id) { ${fields} } }`;
  if (operation === "updateJob") {
    return `mutation Edit($id: ID!, $input: UpdateJobInput!) { updateJob(id: $id, input: $input) { ${fields} } }`;
  }
  return `mutation Act($id: ID!) { ${operation}(id: $id) { ${fields} } }`;
}

const CONTROL_FIELDS =
  "type paused pausedUntil running maxRunning maxRunningPerKey rateLimit { limit periodSeconds perKey } timeoutSeconds";
export const TYPES_QUERY = `query Types { typeControls { ${CONTROL_FIELDS} } }`;
export const PAUSE_MUTATION = `mutation Pause($type: String!) { pauseType(type: $type) { ${CONTROL_FIELDS} } }`;
export const RESUME_MUTATION = `mutation Resume($type: String!) { resumeType(type: $type) { ${CONTROL_FIELDS} } }`;
export const LIMITS_MUTATION = `mutation Limits($input: TypeControlInput!) {
  setTypeControl(input: $input) { ${CONTROL_FIELDS} } }`;

const SCHEDULE_FIELDS = "name type cron timezone paused nextRunAt lastRunAt lastJobId";
export const SCHEDULES_QUERY = `query Schedules { schedules { ${SCHEDULE_FIELDS} } }`;
export const PAUSE_SCHEDULE_MUTATION = `mutation PauseSchedule($name: String!) {
  pauseSchedule(name: $name) { ${SCHEDULE_FIELDS} } }`;
export const RESUME_SCHEDULE_MUTATION = `mutation ResumeSchedule($name: String!) {
  resumeSchedule(name: $name) { ${SCHEDULE_FIELDS} } }`;
export const DELETE_SCHEDULE_MUTATION = "mutation DeleteSchedule($name: String!) { deleteSchedule(name: $name) }";

// "Cancel matching…" and "Retry matching…": first how many jobs of each of `statuses` match the
// list's type (aliases s0, s1, ... in that order), then cancelJobs or retryJobs on its filter.
export function matchingQuery(statuses) {
  const counts = statuses.map((s, i) => `s${i}: jobs(status: ${s}, type: $type, first: 1) { totalCount }`);
  return `query Matching($type: String) { ${counts.join(" ")} }`;
}

export function bulkMutation(operation) {
  return `mutation Bulk($filter: JobFilter!, $limit: Int!) {
  ${operation}(filter: $filter, limit: $limit) { count more } }`;
}
