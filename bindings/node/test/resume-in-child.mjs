// Run by suspend.test.mjs and output-agents.test.mjs as a second process:
// resumes a stored run by its id with the same tools (with `job.agent`,
// the same sub-agent holding them), and prints the result as JSON.
import { Client, tool, agent } from 'nexus-loop';

const job = JSON.parse(process.argv[2]);
const sendEmail = tool({
  name: 'send_email',
  description: 'Sends an email once approved',
  inputSchema: { type: 'object', properties: { to: { type: 'string' } }, required: ['to'] },
  execute: ({ to }, ctx) => (ctx.answer ? `sent to ${ctx.request?.data?.to ?? to}` : `not approved: ${to}`),
});
const tools = job.agent ? [agent({ name: 'mailer', description: 'Sends emails.', tools: [sendEmail], model: 'child' })] : [sendEmail];
const client = new Client(job.options);
const result = await client.resume(job.runId, { answers: job.answers, tools });
process.stdout.write(JSON.stringify(result));
