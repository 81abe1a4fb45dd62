// The trajectories that show the reward-hacking alarm (templates/rollouts/_alarm_examples.html): links
// refilled from each hacking_alarm message, so the banner names the same ones a reload would.

export function setAlarmExamples(banner, alarm) {
  const box = banner.querySelector("[data-alarm-examples]");
  const links = box && box.querySelector("[data-alarm-example-links]");
  if (!links) return;
  const examples = (alarm && alarm.examples) || [];
  links.replaceChildren();
  examples.forEach(function (example, index) {
    if (index) links.append(", ");
    const link = document.createElement("a");
    link.href = example.url;
    link.dataset.alarmExample = "";
    link.textContent = "#" + example.id;
    const where = document.createElement("span");
    where.className = "muted";
    where.textContent = " (" + (example.split === "eval" ? "held-out, " : "") + "step " + example.step +
      ", reward " + Number(example.reward).toFixed(2) + ")";
    links.append(link, where);
  });
  box.hidden = examples.length === 0;
}
