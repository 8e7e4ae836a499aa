// Run by output-agents.test.mjs as a second process: resumes a stored run
// whose sub-agent waits, with the same agent and tools, and prints the result.
import { Client, tool, agent } from 'nexus-loop';

const job = JSON.parse(process.argv[2]);
const sendEmail = tool({
  name: 'send_email',
  description: 'Sends an email once approved',
  inputSchema: { type: 'object', properties: { to: { type: 'string' } }, required: ['to'] },
  execute: ({ to }, ctx) => (ctx.answer ? `sent to ${to}` : `not approved: ${to}`),
});
const mailer = agent({ name: 'mailer', description: 'Sends emails.', tools: [sendEmail], model: 'child' });
const client = new Client(job.options);
const result = await client.resume(job.runId, { answers: job.answers, tools: [mailer] });
process.stdout.write(JSON.stringify(result));
