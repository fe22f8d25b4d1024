package io.github.bncdeploy.javasample;

import android.app.Activity;
import android.graphics.Color;
import android.graphics.Typeface;
import android.os.Bundle;
import android.view.View;
import android.widget.Button;
import android.widget.EditText;
import android.widget.LinearLayout;
import android.widget.ScrollView;
import android.widget.TextView;
import bncdeploy.BncModel;
import java.io.IOException;
import java.io.InputStream;
import java.util.Locale;

/**
 * One screen, built in code from framework widgets: the model bundled as the asset {@code model.bnc}, a row of
 * codes (it starts with the first check row stored in the model), its class and scores, and a button that
 * runs the model's check set against the Python reference's results (the asset {@code check.txt}). The
 * model is small, so it is loaded and run on the main thread.
 */
public final class MainActivity extends Activity {
    static final String MODEL_ASSET = "model.bnc";
    static final String CHECK_ASSET = "check.txt";
    private static final int RED = Color.rgb(0xB0, 0x00, 0x20);
    private static final int GREEN = Color.rgb(0x1B, 0x5E, 0x20);

    private BncModel model;
    private int nextCheckRow;
    private EditText row;
    private TextView result;
    private TextView scores;
    private TextView checkResult;

    @Override
    protected void onCreate(Bundle savedInstanceState) {
        super.onCreate(savedInstanceState);
        LinearLayout page = new LinearLayout(this);
        page.setOrientation(LinearLayout.VERTICAL);
        int pad = dp(16);
        page.setPadding(pad, pad, pad, pad);
        TextView title = text(getString(R.string.title), false);
        title.setTextSize(22);
        page.addView(title);
        TextView info = text("", false);
        page.addView(info);
        page.addView(text(getString(R.string.input_help), false));
        row = new EditText(this);
        row.setHint(R.string.row_hint);
        row.setTypeface(Typeface.MONOSPACE);
        page.addView(row);
        Button classify = button(R.string.classify, new View.OnClickListener() {
            @Override public void onClick(View view) {
                classify();
            }
        });
        Button useCheckRow = button(R.string.use_check_row, new View.OnClickListener() {
            @Override public void onClick(View view) {
                useNextCheckRow();
            }
        });
        Button runCheckSet = button(R.string.run_check_set, new View.OnClickListener() {
            @Override public void onClick(View view) {
                runCheckSet();
            }
        });
        page.addView(classify);
        page.addView(useCheckRow);
        page.addView(runCheckSet);
        result = text(getString(R.string.no_result), false);
        scores = text("", true);
        checkResult = text("", false);
        page.addView(result);
        page.addView(scores);
        page.addView(checkResult);
        TextView features = text("", true);
        page.addView(text(getString(R.string.features), false));
        page.addView(features);
        ScrollView scroll = new ScrollView(this);
        scroll.addView(page);
        setContentView(scroll);

        try {
            model = loadModel();
        } catch (IOException | RuntimeException exc) {
            info.setText(MODEL_ASSET + ": not loaded (" + exc.getMessage() + ")");
            info.setTextColor(RED);
            classify.setEnabled(false);
            useCheckRow.setEnabled(false);
            runCheckSet.setEnabled(false);
            return;
        }
        info.setText(Describe.model(MODEL_ASSET, model));
        features.setText(Describe.features(model));
        boolean hasCheckRows = model.checkRows() != null;
        useCheckRow.setEnabled(hasCheckRows);
        runCheckSet.setEnabled(hasCheckRows);
        if (hasCheckRows) {
            useNextCheckRow(); // the first check row stored in the model, classified
        }
    }

    private BncModel loadModel() throws IOException {
        InputStream in = getAssets().open(MODEL_ASSET);
        try {
            return BncModel.load(in, MODEL_ASSET);
        } finally {
            in.close();
        }
    }

    private void useNextCheckRow() {
        int[][] rows = model.checkRows();
        row.setText(RowText.format(rows[nextCheckRow]));
        nextCheckRow = (nextCheckRow + 1) % rows.length;
        classify();
    }

    private void classify() {
        int[] codes;
        long start = System.nanoTime();
        int label;
        double[] logJoint;
        try {
            codes = RowText.parse(row.getText().toString());
            start = System.nanoTime();
            label = model.predict(codes);
            logJoint = model.logJoint(codes);
        } catch (IllegalArgumentException exc) { // includes BncInputException: names the feature and the value
            result.setText("refused: " + exc.getMessage());
            result.setTextColor(RED);
            scores.setText("");
            return;
        }
        double micros = (System.nanoTime() - start) / 1e3;
        result.setText(String.format(Locale.ROOT, "class %d (%s) in %.1f \u00b5s", label,
            model.classNames()[label], micros));
        result.setTextColor(Color.BLACK);
        scores.setText(Describe.scores(model, label, logJoint, model.predictProba(codes)));
    }

    private void runCheckSet() {
        CheckSet.Result outcome;
        try {
            InputStream in = getAssets().open(CHECK_ASSET);
            try {
                outcome = CheckSet.run(model, CheckSet.Expected.read(in));
            } finally {
                in.close();
            }
        } catch (IOException | RuntimeException exc) {
            outcome = new CheckSet.Result(false, "FAILED: " + CHECK_ASSET + ": " + exc.getMessage());
        }
        int n = model.checkRows().length;
        checkResult.setText("Check set (" + n + " rows stored in the model file): " + outcome.message);
        checkResult.setTextColor(outcome.passed ? GREEN : RED);
    }

    private TextView text(String value, boolean monospace) {
        TextView view = new TextView(this);
        view.setText(value);
        view.setPadding(0, dp(4), 0, dp(4));
        if (monospace) {
            view.setTypeface(Typeface.MONOSPACE);
        }
        return view;
    }

    private Button button(int label, View.OnClickListener listener) {
        Button view = new Button(this);
        view.setText(label);
        view.setOnClickListener(listener);
        return view;
    }

    private int dp(int value) {
        return Math.round(value * getResources().getDisplayMetrics().density);
    }
}
