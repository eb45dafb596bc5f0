// The job's progress as its holder last reported it (reportProgress): a bar, the percentage, the
// message and when. Progress belongs to an attempt: a new claim starts it again from nothing.
import { timeElement } from "./render.js";

export function progressView(job) {
  if (job.progress === null || job.progress === undefined) return "not reported";
  const bar = document.createElement("progress");
  bar.max = 1;
  bar.value = job.progress;
  bar.dataset.progress = "";
  bar.setAttribute("aria-label", `Progress of attempt ${job.attempt}`);
  const view = document.createElement("span");
  view.className = "progress";
  view.append(bar, ` ${Math.round(job.progress * 100)} %`);
  if (job.progressMessage) view.append(` · ${job.progressMessage}`);
  if (job.progressAt) view.append(" · ", timeElement(job.progressAt));
  return view;
}
