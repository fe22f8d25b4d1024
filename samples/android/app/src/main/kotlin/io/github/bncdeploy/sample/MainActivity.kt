package io.github.bncdeploy.sample

import android.app.Activity
import android.graphics.Typeface
import android.os.Bundle
import android.widget.Button
import android.widget.EditText
import android.widget.LinearLayout
import android.widget.ScrollView
import android.widget.TextView
import java.io.File

/**
 * One screen: a row of codes, a button, and what each runtime predicts for it. The models are small (a few KB),
 * so they are loaded and run on the main thread; a real app with big models would use a background thread.
 *
 * Put the exports into app/src/main/assets/ as model.tflite, model.ort and model.bnc (see README.md); a file
 * that is missing is reported on the screen, the others still run.
 */
class MainActivity : Activity() {
    private val classifiers = mutableListOf<Classifier>()
    private val problems = mutableListOf<String>()

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        load("model.bnc", ::BncClassifier)
        load("model.tflite", ::LiteRtClassifier)
        load("model.ort", ::OrtClassifier)

        val example = classifiers.filterIsInstance<BncClassifier>().firstOrNull()?.exampleRow
        val input = EditText(this).apply {
            hint = "comma-separated codes, e.g. 0,3,1,2"
            setText(example?.joinToString(",") ?: "")
        }
        val output = TextView(this).apply { typeface = Typeface.MONOSPACE }
        val button = Button(this).apply {
            text = "Predict"
            setOnClickListener { output.text = predictAll(input.text.toString()) }
        }
        setContentView(LinearLayout(this).apply {
            orientation = LinearLayout.VERTICAL
            setPadding(32, 32, 32, 32)
            addView(input)
            addView(button)
            addView(ScrollView(this@MainActivity).apply { addView(output) })
        })
        output.text = problems.joinToString("\n")
    }

    override fun onDestroy() {
        classifiers.forEach { it.close() }
        super.onDestroy()
    }

    /** Copies the asset to app storage (the runtimes take a file) and opens it; records why not otherwise. */
    private fun load(asset: String, open: (File) -> Classifier) {
        try {
            val file = File(filesDir, asset)
            assets.open(asset).use { source -> file.outputStream().use { source.copyTo(it) } }
            classifiers += open(file)
        } catch (exc: Exception) {
            problems += "$asset: not loaded (${exc.message})"
        }
    }

    private fun predictAll(text: String): String {
        val codes = try {
            text.split(",").map { it.trim().toInt() }.toIntArray()
        } catch (exc: NumberFormatException) {
            return "not a row of integer codes: ${exc.message}"
        }
        val lines = classifiers.map { classifier ->
            try {
                val p = classifier.classify(codes)
                val scores = p.scores.joinToString(", ") { "%.4f".format(it) }
                "${classifier.description}\n  class ${p.label} (${p.className})\n  log p(c, x) = [$scores]"
            } catch (exc: Exception) { // OrtException is a checked exception, not a RuntimeException
                "${classifier.description}\n  refused: ${exc.message}"
            }
        }
        return (lines + problems).joinToString("\n\n")
    }
}
