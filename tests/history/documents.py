"""The GraphQL documents the history's clients send; each root field is the Op's `kind`."""

from __future__ import annotations

JOB = "id type status attempt concurrencyKey"
# what an update may change: a claim's answer shows which values it saw (API.md section 12)
SETTINGS = "priority maxRetries runAt expiresAt"
# a worker reads the job's fate from its payload; a claim resets progress
CLAIMED = JOB + " payload snoozeCount progress " + SETTINGS

ENQUEUE = f"""mutation($input: EnqueueJobInput!) {{
  enqueueJob(input: $input) {{ created job {{ {JOB} }} }} }}"""
ENQUEUE_MANY = f"""mutation($inputs: [EnqueueJobInput!]!) {{
  enqueueJobs(inputs: $inputs) {{ created job {{ {JOB} }} }} }}"""
CLAIM_ONE = f"""mutation($types: [String!], $lease: Int, $wait: Int) {{
  claimJob(types: $types, leaseSeconds: $lease, waitSeconds: $wait) {{ {CLAIMED} }} }}"""
CLAIM_MANY = f"""mutation($limit: Int!, $types: [String!], $lease: Int, $wait: Int) {{
  claimJobs(limit: $limit, types: $types, leaseSeconds: $lease, waitSeconds: $wait) {{ {CLAIMED} }} }}"""
COMPLETE = f"""mutation($id: ID!, $attempt: Int) {{
  completeJob(id: $id, attempt: $attempt) {{ {JOB} }} }}"""
COMPLETE_MANY = f"""mutation($items: [CompleteJobInput!]!) {{
  completeJobs(items: $items) {{ completed {{ {JOB} }} rejected }} }}"""
FAIL = f"""mutation($id: ID!, $attempt: Int, $retryable: Boolean!, $error: String!) {{
  failJob(id: $id, attempt: $attempt, error: $error, retryable: $retryable, retryInSeconds: 0) {{
    {JOB} }} }}"""
HEARTBEAT = f"""mutation($id: ID!, $attempt: Int, $lease: Int) {{
  heartbeatJob(id: $id, attempt: $attempt, leaseSeconds: $lease) {{ {JOB} cancelRequested }} }}"""
SNOOZE = f"""mutation($id: ID!, $attempt: Int!, $seconds: Int!) {{
  snoozeJob(id: $id, attempt: $attempt, seconds: $seconds) {{ {JOB} snoozeCount }} }}"""
PROGRESS = f"""mutation($id: ID!, $attempt: Int!, $progress: Float!, $message: String) {{
  reportProgress(id: $id, attempt: $attempt, progress: $progress, message: $message) {{
    {JOB} progress cancelRequested }} }}"""
UPDATE = f"""mutation($id: ID!, $input: UpdateJobInput!) {{
  updateJob(id: $id, input: $input) {{ {JOB} {SETTINGS} }} }}"""
RUN_NOW = f"mutation($id: ID!) {{ runJobNow(id: $id) {{ {JOB} {SETTINGS} }} }}"
CANCEL = f"mutation($id: ID!) {{ cancelJob(id: $id) {{ {JOB} }} }}"
RETRY = f"mutation($id: ID!) {{ retryJob(id: $id) {{ {JOB} }} }}"
CANCEL_MANY = """mutation($filter: JobFilter!, $limit: Int!) {
  cancelJobs(filter: $filter, limit: $limit) { count more } }"""
RETRY_MANY = """mutation($filter: JobFilter!, $limit: Int!) {
  retryJobs(filter: $filter, limit: $limit) { count more } }"""

CONTROL = "type paused maxRunning maxRunningPerKey rateLimit { limit periodSeconds perKey } running"
PAUSE = f"mutation($type: String!) {{ pauseType(type: $type) {{ {CONTROL} }} }}"
RESUME = f"mutation($type: String!) {{ resumeType(type: $type) {{ {CONTROL} }} }}"
SET_CONTROL = f"""mutation($input: TypeControlInput!) {{
  setTypeControl(input: $input) {{ {CONTROL} }} }}"""
CONTROLS = f"{{ typeControls {{ {CONTROL} }} }}"

JOBS_WITH_STATUS = """query($status: JobStatus!, $type: String) {
  jobs(status: $status, type: $type, first: 20) { nodes { id type status } } }"""
STATS = "{ queueStats { byType { type counts { pending running completed failed cancelled } } } }"

JOB_UPDATED = "subscription($id: ID!) { jobUpdated(id: $id) { id status attempt } }"
